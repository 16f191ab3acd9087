"""Tests for protocols.history: the conversation history value (add, remove, view, search,
rehydrate, reference, snapshot), compaction planning and applying (plan_fold, fold, plan_collapse,
collapse) and the rendering helpers (render_for_provider, estimate_messages, summary_inputs).

No event loop: the module is pure. The planning properties are checked against a brute-force
reference that tries every fold boundary."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.accounting import estimate_tokens
from protocols.codec import decode, dumps, encode
from protocols.errors import ValidationError
from protocols.history import (
    IMAGE_TOKEN_ESTIMATE,
    INTERRUPTED_NOTE,
    MESSAGE_TOKEN_OVERHEAD,
    RECAP_PREFIX,
    ConversationSnapshot,
    History,
    Section,
    estimate_messages,
    plan_collapse,
    plan_fold,
    recap,
    reference_text,
    render_for_provider,
    summary_inputs,
    unanswered_calls,
)
from protocols.messages import Message, Role, ToolCall

SETTINGS = settings(max_examples=40, deadline=None)

# --------------------------------------------------------------------------- helpers


def user(n: int, content: str | None = None) -> Message:
    """A user message with the id ``m<n>`` and the time ``n``."""
    return Message.user(f"user {n}" if content is None else content, id=f"m{n}", created_at=n)


def users(count: int, start: int = 0) -> list[Message]:
    return [user(n) for n in range(start, start + count)]


def call(call_id: str, name: str = "lookup") -> ToolCall:
    return ToolCall(call_id, name, {"q": call_id})


def asks(n: int, *call_ids: str) -> Message:
    """An assistant message ``m<n>`` making the calls ``call_ids``."""
    return Message.assistant(calls=[call(c) for c in call_ids], id=f"m{n}", created_at=n)


def answers(n: int, call_id: str) -> Message:
    """The tool message ``m<n>`` answering ``call_id``."""
    return Message.tool(call_id, "lookup", f"result of {call_id}", id=f"m{n}", created_at=n)


def flattened(history: History) -> list[Message]:
    """Every message the history holds: the sections' originals (oldest first), then the tail."""
    return [m for section in history.sections for m in section.messages] + list(history.messages)


def three_sections() -> History:
    """Sections s0 (m0, m1), s1 (m2), s2 (m3, m4), tail m5, m6."""
    history = History("conv").add(users(7))
    history = history.fold(2, "first", section_id="s0")
    history = history.fold(1, "second", section_id="s1")
    return history.fold(2, "third", section_id="s2")


# --------------------------------------------------------------------------- strategies

UTF8 = st.characters(codec="utf-8")
TEXT = st.text(alphabet=UTF8, max_size=12)
NONEMPTY = st.text(alphabet=UTF8, min_size=1, max_size=8)
STAMPS = st.floats(min_value=0, max_value=1e10, allow_nan=False, allow_infinity=False)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**53), max_value=2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
)
JSON_OBJECTS = st.dictionaries(TEXT, SCALARS, max_size=2)
TOOL_NAMES = st.sampled_from(["lookup", "add", "get_time", "search"])


@st.composite
def conversations(draw: st.DrawFn, *, scatter: bool = False) -> list[Message]:
    """A well-formed message sequence with unique ids ``m<n>`` and call ids ``c<n>``: text turns,
    assistant messages with 1-3 calls followed by their results (in any order), and perhaps a
    trailing assistant whose results are missing or only partly present. With ``scatter``, text
    messages may also stand between a call and its results."""
    out: list[Message] = []
    calls_made = 0

    def new_calls() -> list[ToolCall]:
        nonlocal calls_made
        count = draw(st.integers(1, 3))
        made = [
            ToolCall(f"c{calls_made + i}", draw(TOOL_NAMES), draw(JSON_OBJECTS))
            for i in range(count)
        ]
        calls_made += count
        return made

    def stamp() -> dict[str, Any]:
        return {"id": f"m{len(out)}", "created_at": draw(STAMPS)}

    def text_message() -> Message:
        kind = draw(st.sampled_from(["user", "assistant", "system"]))
        if kind == "user":
            images = draw(st.lists(NONEMPTY, max_size=2))
            return Message.user(draw(TEXT), images=images, **stamp())
        if kind == "assistant":
            return Message.assistant(
                draw(TEXT),
                thinking=draw(TEXT),
                interrupted=draw(st.booleans()),
                continuation=draw(JSON_OBJECTS),
                **stamp(),
            )
        return Message.system(draw(TEXT), **stamp())

    def results(made: Sequence[ToolCall]) -> None:
        for answered in draw(st.permutations(made)):
            if scatter and draw(st.booleans()):
                out.append(text_message())
            out.append(Message.tool(answered.id, answered.name, draw(TEXT), **stamp()))

    for _ in range(draw(st.integers(0, 6))):
        if draw(st.booleans()):
            out.append(text_message())
        else:
            made = new_calls()
            out.append(Message.assistant(draw(TEXT), calls=made, **stamp()))
            results(made)
    if draw(st.booleans()):
        made = new_calls()
        out.append(Message.assistant(draw(TEXT), calls=made, **stamp()))
        present = draw(st.integers(0, len(made) - 1))
        results(draw(st.permutations(made))[:present])
    return out


@st.composite
def histories(draw: st.DrawFn) -> tuple[History, list[Message]]:
    """A history built from a random conversation by adds, folds at random points, collapses and
    rollup changes; also the messages in the order they were added."""
    added = draw(conversations(scatter=draw(st.booleans())))
    history = History(draw(NONEMPTY))
    sections = 0
    position = 0
    while position < len(added):
        step = draw(st.integers(1, len(added) - position))
        history = history.add(added[position : position + step])
        position += step
        if draw(st.booleans()):
            count = draw(st.integers(1, history.count))
            history = history.fold(count, draw(TEXT), section_id=f"s{sections}")
            sections += 1
        if len(history.sections) >= 2 and draw(st.booleans()):
            count = draw(st.integers(2, len(history.sections)))
            history = history.collapse(count, draw(TEXT), section_id=f"s{sections}")
            sections += 1
        if draw(st.booleans()):
            history = history.with_summary(draw(st.none() | TEXT))
    return history, added


# --------------------------------------------------------------------------- History basics


def test_a_new_history_is_empty_with_a_minted_id() -> None:
    first, second = History(), History()
    assert re.fullmatch(r"[0-9a-f]{32}", first.id)
    assert first.id != second.id
    assert (first.messages, first.sections, first.summary, first.count) == ((), (), None, 0)
    assert first.view() == ()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"id": ""},
        {"id": 3},
        {"messages": ["hello"]},
        {"sections": [Message.user("x")]},
        {"summary": 1},
    ],
    ids=["empty-id", "int-id", "str-message", "message-as-section", "int-summary"],
)
def test_history_refuses_malformed_fields(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        History(**kwargs)


def test_history_is_frozen() -> None:
    history = History("conv")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        history.summary = "x"  # type: ignore[misc]


def test_add_appends_in_order_and_returns_a_new_value() -> None:
    empty = History("conv")
    one = empty.add([user(0)])
    three = one.add(iter([user(1), user(2)]))
    assert empty.messages == ()
    assert empty.count == 0
    assert one.messages == (user(0),)
    assert one.count == 1
    assert [m.id for m in three.messages] == ["m0", "m1", "m2"]
    assert three.count == 3
    assert three.id == "conv"


def test_add_nothing_gives_an_equal_history() -> None:
    history = History("conv").add(users(2))
    assert history.add([]) == history


@pytest.mark.parametrize(
    "duplicate",
    ["within-batch", "in-tail", "in-section"],
)
def test_add_refuses_an_id_already_in_the_conversation(duplicate: str) -> None:
    history = History("conv").add(users(3)).fold(2, "s", section_id="s0")
    before = history.snapshot()
    batch = {
        "within-batch": [user(10), user(10, "again")],
        "in-tail": [user(2, "same id as the live m2")],
        "in-section": [user(0, "same id as the folded m0")],
    }[duplicate]
    with pytest.raises(ValidationError):
        history.add(batch)
    # A refused change leaves the old value as it was.
    assert history.snapshot() == before


def test_add_refuses_non_messages() -> None:
    with pytest.raises(ValidationError):
        History("conv").add(["not a message"])  # type: ignore[list-item]


def test_message_finds_live_messages_only() -> None:
    history = History("conv").add(users(3)).fold(1, "s", section_id="s0")
    live = history.messages[1]
    assert history.message("m2") is live
    assert history.message("m0") is None  # folded: no longer live
    assert history.message("s0") is None  # a section id is not a message
    assert history.message("nope") is None


def test_remove_all_found() -> None:
    history = History("conv").add(users(4))
    after, found = history.remove(["m1", "m3"])
    assert found is True
    assert [m.id for m in after.messages] == ["m0", "m2"]
    assert history.count == 4


def test_remove_some_missing_still_removes_the_found_ones() -> None:
    history = History("conv").add(users(3))
    after, found = history.remove(["m1", "missing"])
    assert found is False
    assert [m.id for m in after.messages] == ["m0", "m2"]


def test_remove_does_not_reach_into_sections() -> None:
    history = History("conv").add(users(3)).fold(1, "s", section_id="s0")
    after, found = history.remove(["m0"])
    assert found is False
    assert after == history
    assert after.sections[0].messages == (user(0),)


def test_remove_with_repeated_ids_and_with_none() -> None:
    history = History("conv").add(users(2))
    after, found = history.remove(iter(["m0", "m0"]))
    assert found is True
    assert [m.id for m in after.messages] == ["m1"]
    # No ids: every one of them (none) was found, and nothing changes.
    unchanged, found = history.remove([])
    assert found is True
    assert unchanged == history


def test_a_removed_id_can_be_added_again() -> None:
    history, _ = History("conv").add(users(2)).remove(["m1"])
    again = history.add([user(1, "back")])
    assert again.message("m1") == user(1, "back")


def test_clear_empties_the_tail_and_keeps_sections_and_rollup() -> None:
    history = History("conv").add(users(4)).fold(2, "s", section_id="s0").with_summary("roll")
    cleared = history.clear()
    assert cleared.messages == ()
    assert cleared.count == 0
    assert cleared.sections == history.sections
    assert cleared.summary == "roll"
    assert cleared.id == "conv"
    assert history.count == 2


def test_with_summary_replaces_the_rollup_only() -> None:
    history = History("conv").add(users(2))
    rolled = history.with_summary("roll")
    assert rolled.summary == "roll"
    assert history.summary is None
    assert rolled.with_summary(None).summary is None
    assert rolled.messages == history.messages
    with pytest.raises(ValidationError):
        history.with_summary(5)  # type: ignore[arg-type]


def test_every_change_leaves_the_old_value_unchanged() -> None:
    history = three_sections().with_summary("roll")
    before = history.snapshot()
    changed = [
        history.add([user(20)]),
        history.remove(["m5"])[0],
        history.clear(),
        history.fold(1, "f", section_id="s9"),
        history.collapse(2, "c", section_id="s8"),
        history.with_summary("other"),
    ]
    assert history.snapshot() == before
    assert all(new is not history and new != history for new in changed)


# --------------------------------------------------------------------------- view


def test_view_is_one_recap_per_section_then_the_tail() -> None:
    history = three_sections().with_summary("THE ROLLUP")
    view = history.view()
    assert len(view) == 3 + 2
    for shown, section, summary, last in zip(
        view, history.sections, ["first", "second", "third"], [1, 2, 4], strict=False
    ):
        assert shown.role is Role.ASSISTANT
        assert shown.content == RECAP_PREFIX + summary
        assert shown.id == section.id
        assert shown.created_at == float(last)
        assert shown.calls == ()
        assert not shown.interrupted
        assert shown == recap(section)
    assert view[3:] == history.messages
    # The rollup is never part of the view.
    assert not any("THE ROLLUP" in m.content for m in view)


def test_recap_prefix_is_a_label_followed_by_a_space() -> None:
    assert RECAP_PREFIX.startswith("[")
    assert RECAP_PREFIX.endswith("] ")
    section = Section("s", "the gist", (user(7),))
    assert recap(section).content == f"{RECAP_PREFIX}the gist"


def test_views_of_equal_histories_are_equal() -> None:
    assert three_sections().view() == three_sections().view()


@SETTINGS
@given(histories())
def test_view_shape_on_random_histories(case: tuple[History, list[Message]]) -> None:
    history, _ = case
    view = history.view()
    sections = len(history.sections)
    assert len(view) == sections + history.count
    assert view[sections:] == history.messages
    for shown, section in zip(view, history.sections, strict=False):
        assert shown.id == section.id
        assert shown.role is Role.ASSISTANT
        assert shown.content == RECAP_PREFIX + section.summary
        assert shown.created_at == section.messages[-1].created_at


# --------------------------------------------------------------------------- search


def searchable() -> History:
    history = History("conv").add(
        [
            Message.user("The Needle in one", id="a"),
            Message.user("nothing here", id="b"),
        ]
    )
    history = history.fold(2, "needle summary", section_id="s0")
    history = history.add([Message.assistant("NEEDLE in two", thinking="needle", id="c")])
    history = history.fold(1, "needle again", section_id="s1")
    return history.add(
        [
            Message.assistant("no match", thinking="needle in thinking", id="d"),
            Message.tool("c9", "needle", "a needle in the tail", id="e"),
        ]
    ).with_summary("needle rollup")


def test_search_is_case_insensitive_over_originals_then_tail() -> None:
    history = searchable()
    assert [m.id for m in history.search("needle")] == ["a", "c", "e"]
    assert [m.id for m in history.search("nEeDlE IN")] == ["a", "c", "e"]
    assert [m.id for m in history.search("tail")] == ["e"]


def test_search_looks_at_content_only() -> None:
    history = searchable()
    # Thinking, tool names, section summaries and the rollup are not searched.
    hits = history.search("needle")
    assert "d" not in [m.id for m in hits]
    assert history.search("summary") == ()
    assert history.search("rollup") == ()
    assert all(not m.content.startswith(RECAP_PREFIX) for m in hits)


def test_search_uses_casefold() -> None:
    history = History("conv").add([Message.user("Die Straße", id="a"), Message.user("x", id="b")])
    assert [m.id for m in history.search("STRASSE")] == ["a"]
    assert [m.id for m in history.search("straße")] == ["a"]


def test_search_with_an_empty_query_or_no_match_is_empty() -> None:
    history = searchable()
    assert history.search("") == ()
    assert history.search("zzz") == ()
    assert History("empty").search("x") == ()


@SETTINGS
@given(histories(), TEXT)
def test_search_matches_its_definition(case: tuple[History, list[Message]], query: str) -> None:
    history, added = case
    query = query or "a"
    hits = history.search(query)
    expected = [m for m in added if query.casefold() in m.content.casefold()]
    assert list(hits) == expected


# --------------------------------------------------------------------------- rehydrate


def test_rehydrate_gives_a_sections_originals() -> None:
    history = three_sections()
    assert history.rehydrate("s0") == (user(0), user(1))
    assert history.rehydrate("s1") == (user(2),)
    assert history.rehydrate("s2") == (user(3), user(4))


def test_rehydrate_unknown_ids_and_nothing_is_reinserted() -> None:
    history = three_sections()
    before = history.snapshot()
    assert history.rehydrate("nope") == ()
    assert history.rehydrate("m5") == ()  # a live message id is not a section id
    history.rehydrate("s0")
    assert history.snapshot() == before
    assert history.count == 2


def test_rehydrate_after_collapse() -> None:
    history = three_sections().collapse(2, "merged", section_id="sx")
    assert history.rehydrate("sx") == (user(0), user(1), user(2))
    assert history.rehydrate("s0") == ()
    assert history.rehydrate("s1") == ()
    assert history.rehydrate("s2") == (user(3), user(4))


# --------------------------------------------------------------------------- reference


def header(label: str) -> str:
    return f'[Reference -- conversation "{label}" -- NOT part of this conversation]'


def test_reference_line_format_exactly() -> None:
    text = reference_text(
        "trip",
        summary="We planned a trip.",
        messages=[
            Message.user("Where to?"),
            Message.assistant("Lisbon."),
            Message.tool("c1", "weather", "sunny"),
        ],
    )
    assert text == (
        '[Reference -- conversation "trip" -- NOT part of this conversation]\n'
        "Summary: We planned a trip.\n"
        "Relevant messages:\n"
        "- user: Where to?\n"
        "- assistant: Lisbon.\n"
        "- tool: sunny"
    )


def test_reference_text_parts_are_optional() -> None:
    assert reference_text("x") == header("x")
    assert reference_text("x", summary=None, messages=()) == header("x")
    assert reference_text("x", summary="s") == f"{header('x')}\nSummary: s"
    only_messages = reference_text("x", messages=[Message.system("rules")])
    assert only_messages == f"{header('x')}\nRelevant messages:\n- system: rules"


def test_reference_label_defaults_to_the_id() -> None:
    history = History("conv-7")
    assert history.reference() == header("conv-7")
    assert history.reference(label="Trip") == header("Trip")


def test_reference_summary_only_with_a_rollup_and_summary_true() -> None:
    plain = History("conv").add(users(3)).fold(2, "section summary", section_id="s0")
    # No rollup yet: no Summary line (section summaries are not the rollup).
    assert plain.reference() == header("conv")
    rolled = plain.with_summary("the rollup")
    assert rolled.reference() == f"{header('conv')}\nSummary: the rollup"
    assert rolled.reference(summary=True) == rolled.reference()
    assert rolled.reference(summary=False) == header("conv")


def test_reference_messages_only_when_given() -> None:
    history = History("conv").with_summary("roll")
    picked = [user(1, "first"), Message.assistant("second")]
    assert history.reference(messages=[]) == f"{header('conv')}\nSummary: roll"
    assert history.reference(messages=picked, summary=False, label="L").splitlines() == [
        header("L"),
        "Relevant messages:",
        "- user: first",
        "- assistant: second",
    ]


def test_reference_does_not_change_the_history() -> None:
    history = three_sections().with_summary("roll")
    before = history.snapshot()
    history.reference(messages=history.messages)
    assert history.snapshot() == before


# --------------------------------------------------------------------------- snapshot / restore


def test_snapshot_is_the_history_as_plain_data() -> None:
    history = three_sections().with_summary("roll")
    snapshot = history.snapshot()
    assert isinstance(snapshot, ConversationSnapshot)
    assert snapshot.id == "conv"
    assert snapshot.summary == "roll"
    assert snapshot.sections == history.sections
    assert snapshot.messages == history.messages
    empty = History("e").snapshot()
    assert (empty.summary, empty.sections, empty.messages) == (None, (), ())


def round_trip(history: History) -> None:
    snapshot = history.snapshot()
    text = encode(snapshot)
    decoded = decode(ConversationSnapshot, text)
    assert decoded == snapshot
    restored = History.restore(decoded)
    assert restored == history
    assert restored.snapshot() == snapshot
    assert encode(restored.snapshot()) == text
    assert encode(restored.snapshot(), canonical=True) == encode(snapshot, canonical=True)
    assert restored.view() == history.view()


def test_snapshot_round_trip_through_json() -> None:
    history = History("conv").add(
        [
            user(0),
            Message.assistant("let me look", calls=[call("c1")], id="m1", created_at=1.5),
            answers(2, "c1"),
            Message.assistant("cut", interrupted=True, thinking="t", id="m3", created_at=3),
        ]
    )
    round_trip(history)
    round_trip(history.fold(3, "folded", section_id="s0").with_summary("roll"))
    round_trip(History("empty"))


def test_a_restored_history_keeps_compacting() -> None:
    history = three_sections().with_summary("roll")
    restored = History.restore(decode(ConversationSnapshot, encode(history.snapshot())))
    folded = restored.fold(1, "more", section_id="s3").collapse(3, "merged", section_id="s4")
    assert [s.id for s in folded.sections] == ["s4", "s3"]
    assert flattened(folded) == flattened(history)


def test_restore_refuses_duplicate_message_ids() -> None:
    twice = ConversationSnapshot(
        "conv", sections=[Section("s0", "sum", [user(1)])], messages=[user(1, "again")]
    )
    with pytest.raises(ValidationError):
        History.restore(twice)
    decoded = decode(ConversationSnapshot, encode(twice))
    with pytest.raises(ValidationError):
        History.restore(decoded)


@pytest.mark.parametrize(
    ("cls", "args"),
    [
        (ConversationSnapshot, {"id": ""}),
        (ConversationSnapshot, {"id": "c", "summary": 3}),
        (ConversationSnapshot, {"id": "c", "sections": [user(0)]}),
        (ConversationSnapshot, {"id": "c", "messages": ["m"]}),
        (Section, {"id": "", "summary": "s", "messages": ()}),
        (Section, {"id": "s", "summary": None, "messages": ()}),
        (Section, {"id": "s", "summary": "s", "messages": ["m"]}),
    ],
    ids=[
        "snapshot-empty-id",
        "snapshot-int-summary",
        "snapshot-message-as-section",
        "snapshot-str-message",
        "section-empty-id",
        "section-none-summary",
        "section-str-message",
    ],
)
def test_snapshot_and_section_refuse_malformed_fields(cls: Any, args: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        cls(**args)


@SETTINGS
@given(histories())
def test_snapshot_round_trip_on_random_histories(case: tuple[History, list[Message]]) -> None:
    history, added = case
    round_trip(history)
    # Whatever was folded or collapsed, every message is still there, in the order added.
    assert flattened(history) == added


# --------------------------------------------------------------------------- plan_fold


def fold_allowed(messages: Sequence[Message], end: int, keep: int) -> bool:
    """Whether folding ``messages[:end]`` keeps the documented guarantees (a)-(c)."""
    if end > max(len(messages) - keep, 0):
        return False  # (a) the last `keep` messages stay live
    answered = {m.tool_call_id for m in messages if m.role is Role.TOOL}
    made_at = {c.id: i for i, m in enumerate(messages) for c in m.calls}
    for m in messages[:end]:
        if any(c.id not in answered for c in m.calls):
            return False  # (c) a pending call is never folded
    for m in messages[end:]:
        if m.tool_call_id is not None and made_at.get(m.tool_call_id, end) < end:
            return False  # (b) a result never stays live while its call is folded
    return True


def brute_force_fold(messages: Sequence[Message], keep: int) -> int:
    start = max(len(messages) - keep, 0)
    return next(end for end in range(start, -1, -1) if fold_allowed(messages, end, keep))


@SETTINGS
@given(conversations(), st.integers(0, 8))
def test_plan_fold_properties(messages: list[Message], keep: int) -> None:
    end = plan_fold(messages, keep)
    assert 0 <= end <= max(len(messages) - keep, 0)  # (a)
    made_at = {c.id: i for i, m in enumerate(messages) for c in m.calls}
    for m in messages[end:]:  # (b)
        if m.role is Role.TOOL:
            assert m.tool_call_id is not None
            assert made_at[m.tool_call_id] >= end
    answered = {m.tool_call_id for m in messages if m.role is Role.TOOL}
    for m in messages[:end]:  # (c)
        assert all(c.id in answered for c in m.calls)
    assert end == brute_force_fold(messages, keep)  # (d) maximal


@SETTINGS
@given(conversations(scatter=True), st.integers(0, 8))
def test_plan_fold_is_maximal_with_results_far_from_their_calls(
    messages: list[Message], keep: int
) -> None:
    assert plan_fold(messages, keep) == brute_force_fold(messages, keep)


def test_plan_fold_examples() -> None:
    plain = users(3)
    assert plan_fold([]) == 0
    assert plan_fold([], keep=2) == 0
    assert plan_fold(plain) == 3
    assert plan_fold(plain, 1) == 2
    assert plan_fold(plain, keep=3) == 0
    assert plan_fold(plain, keep=10) == 0
    turn = [user(0), asks(1, "c1", "c2"), answers(2, "c1"), answers(3, "c2"), user(4)]
    assert plan_fold(turn) == 5
    assert plan_fold(turn, keep=1) == 4
    # Keeping the last result live would split c2 from its call: the fold ends before it.
    assert plan_fold(turn, keep=2) == 1
    assert plan_fold(turn, keep=3) == 1
    assert plan_fold(turn, keep=4) == 1
    assert plan_fold(turn, keep=5) == 0


def test_plan_fold_stops_before_a_pending_call() -> None:
    missing = [user(0), asks(1, "c1")]
    assert plan_fold(missing) == 1
    partial = [user(0), user(1), asks(2, "c1", "c2"), answers(3, "c2")]
    assert plan_fold(partial) == 2
    # Nothing after a pending call is folded either.
    later = [user(0), asks(1, "c1"), user(2), user(3)]
    assert plan_fold(later) == 1
    assert plan_fold([asks(0, "c1")]) == 0


def test_plan_fold_result_order_does_not_matter() -> None:
    messages = [user(0), asks(1, "a", "b"), answers(2, "b"), answers(3, "a"), user(4)]
    assert plan_fold(messages, keep=1) == 4
    assert plan_fold(messages, keep=2) == 1


@pytest.mark.parametrize("keep", [-1, True, False, 1.0, "1", None])
def test_plan_fold_refuses_a_bad_keep(keep: Any) -> None:
    with pytest.raises(ValidationError):
        plan_fold(users(3), keep)


# --------------------------------------------------------------------------- fold


def test_fold_moves_the_oldest_messages_into_a_new_section() -> None:
    history = History("conv").add(users(5)).with_summary("roll")
    folded = history.fold(3, "the gist", section_id="s0")
    assert folded.messages == tuple(users(2, start=3))
    assert folded.sections == (Section("s0", "the gist", tuple(users(3))),)
    assert folded.summary == "roll"  # the rollup is the caller's to regenerate
    assert history.count == 5
    again = folded.fold(2, "more", section_id="s1")
    assert [s.id for s in again.sections] == ["s0", "s1"]
    assert again.sections[0] == folded.sections[0]
    assert again.sections[1].messages == tuple(users(2, start=3))
    assert again.messages == ()


def test_fold_mints_a_section_id() -> None:
    history = History("conv").add(users(4))
    first = history.fold(2, "a").sections[-1]
    second = history.fold(2, "a").sections[-1]
    assert re.fullmatch(r"[0-9a-f]{32}", first.id)
    assert first.id != second.id


@pytest.mark.parametrize("count", [0, -1, 4])
def test_fold_refuses_a_count_out_of_range(count: int) -> None:
    history = History("conv").add(users(3))
    with pytest.raises(ValidationError):
        history.fold(count, "s")


def test_fold_of_an_empty_tail_is_refused() -> None:
    with pytest.raises(ValidationError):
        History("conv").fold(1, "s")


# fold/collapse refuse bools and floats as plan_fold (keep) and plan_collapse (cap) do.
@pytest.mark.parametrize(
    ("method", "count"),
    [("fold", True), ("fold", 1.0), ("collapse", 2.0)],
    ids=["fold-True", "fold-float", "collapse-float"],
)
def test_fold_and_collapse_refuse_non_int_counts(method: str, count: Any) -> None:
    history = three_sections()
    with pytest.raises(ValidationError):
        getattr(history, method)(count, "s")


@SETTINGS
@given(conversations(), st.data())
def test_fold_moves_exactly_the_oldest_count(messages: list[Message], data: st.DataObject) -> None:
    history = History("conv").add(messages)
    if not messages:
        return
    count = data.draw(st.integers(1, len(messages)))
    folded = history.fold(count, "s", section_id="s0")
    assert folded.sections[-1].messages == tuple(messages[:count])
    assert folded.messages == tuple(messages[count:])
    assert folded.count == len(messages) - count


# --------------------------------------------------------------------------- collapse


def test_collapse_merges_the_oldest_sections_in_order() -> None:
    history = three_sections().with_summary("roll")
    merged = history.collapse(2, "merged", section_id="sx")
    assert [s.id for s in merged.sections] == ["sx", "s2"]
    assert merged.sections[0] == Section("sx", "merged", (user(0), user(1), user(2)))
    assert merged.sections[1] == history.sections[2]
    assert merged.messages == history.messages
    assert merged.summary == "roll"
    everything = history.collapse(3, "all")
    assert len(everything.sections) == 1
    assert everything.sections[0].messages == tuple(users(5))
    assert re.fullmatch(r"[0-9a-f]{32}", everything.sections[0].id)


@pytest.mark.parametrize("count", [1, 0, -2, 4, True])
def test_collapse_refuses_a_count_out_of_range(count: int) -> None:
    with pytest.raises(ValidationError):
        three_sections().collapse(count, "s")


def test_collapse_needs_two_sections() -> None:
    one = History("conv").add(users(2)).fold(1, "s", section_id="s0")
    with pytest.raises(ValidationError):
        one.collapse(2, "s")


# --------------------------------------------------------------------------- plan_collapse


@pytest.mark.parametrize(
    ("sections", "cap", "expected"),
    [
        (0, 1, 0),
        (1, 1, 0),
        (2, 1, 2),
        (5, 1, 5),
        (3, 3, 0),
        (4, 3, 2),
        (10, 4, 7),
        (2, 5, 0),
        (100, None, 0),
    ],
)
def test_plan_collapse_examples(sections: int, cap: int | None, expected: int) -> None:
    assert plan_collapse(sections, cap) == expected


@pytest.mark.parametrize("cap", [0, -1, True, False, 1.5, "2"])
def test_plan_collapse_refuses_a_bad_cap(cap: Any) -> None:
    with pytest.raises(ValidationError):
        plan_collapse(3, cap)


def history_with_sections(count: int) -> History:
    return History(
        "conv", sections=[Section(f"s{n}", f"summary {n}", [user(n)]) for n in range(count)]
    )


@SETTINGS
@given(st.integers(0, 12), st.integers(1, 6))
def test_applying_plan_collapse_respects_the_cap(sections: int, cap: int) -> None:
    history = history_with_sections(sections)
    merge = plan_collapse(sections, cap)
    if sections <= cap:
        assert merge == 0
        return
    assert merge >= 2
    after = history.collapse(merge, "merged", section_id="sx")
    assert len(after.sections) <= cap
    assert len(after.sections) == cap  # no more merged than needed
    assert flattened(after) == flattened(history)


# --------------------------------------------------------------------------- render_for_provider


def test_render_marks_interrupted_answers_only() -> None:
    cut = Message.assistant("half an ans", interrupted=True, thinking="t", id="a1")
    empty_cut = Message.assistant("", interrupted=True, calls=[call("c1")], id="a2")
    whole = Message.assistant("whole", id="a3")
    question = Message.user("q", id="u1")
    rendered = render_for_provider(iter([question, cut, whole, empty_cut]))
    assert isinstance(rendered, tuple)
    assert rendered[0] == question
    assert rendered[1].content == "half an ans\n\n" + INTERRUPTED_NOTE
    assert rendered[1] == attrs.evolve(cut, content=rendered[1].content)
    assert rendered[2] == whole
    assert rendered[3].content == INTERRUPTED_NOTE
    assert rendered[3] == attrs.evolve(empty_cut, content=INTERRUPTED_NOTE)
    # The originals are untouched.
    assert cut.content == "half an ans"
    assert empty_cut.content == ""
    assert render_for_provider([]) == ()


@SETTINGS
@given(conversations())
def test_render_on_random_messages(messages: list[Message]) -> None:
    rendered = render_for_provider(messages)
    assert len(rendered) == len(messages)
    for original, shown in zip(messages, rendered, strict=True):
        if not original.interrupted:
            assert shown == original
        elif original.content:
            assert shown.content == f"{original.content}\n\n{INTERRUPTED_NOTE}"
        else:
            assert shown.content == INTERRUPTED_NOTE
        assert attrs.evolve(shown, content=original.content) == original


# --------------------------------------------------------------------------- estimate_messages


def test_estimate_messages_counts_overhead_text_images_and_calls() -> None:
    assert estimate_messages([]) == 0
    assert estimate_messages([Message.user("")]) == MESSAGE_TOKEN_OVERHEAD
    # "abcde": 5 code points, ceil(5 / 4) = 2 tokens.
    assert estimate_messages([Message.user("abcde")]) == MESSAGE_TOKEN_OVERHEAD + 2
    two_images = Message.user("", images=["aGk=", "aGk="])
    assert estimate_messages([two_images]) == MESSAGE_TOKEN_OVERHEAD + 2 * IMAGE_TOKEN_ESTIMATE
    lookup = ToolCall("c1", "lookup", {"q": "x"})
    # "lookup" is 6 code points (2 tokens); its arguments {"q":"x"} are 9 (3 tokens).
    assert dumps(lookup.arguments) == '{"q":"x"}'
    asking = Message.assistant("", calls=[lookup])
    assert estimate_messages([asking]) == MESSAGE_TOKEN_OVERHEAD + 2 + 3


def test_estimate_messages_ignores_thinking_and_adds_up() -> None:
    plain = Message.assistant("abcd")
    thoughtful = Message.assistant("abcd", thinking="a long chain of thought " * 10)
    assert estimate_messages([thoughtful]) == estimate_messages([plain])
    many = [plain, Message.user("hello world"), Message.tool("c", "t", "xyz")]
    assert estimate_messages(iter(many)) == sum(estimate_messages([m]) for m in many)
    expected = sum(MESSAGE_TOKEN_OVERHEAD + estimate_tokens(m.content) for m in many)
    assert estimate_messages(many) == expected


@SETTINGS
@given(conversations(scatter=True), st.data())
def test_estimate_messages_is_monotonic(messages: list[Message], data: st.DataObject) -> None:
    base = estimate_messages(messages)
    extra = data.draw(st.sampled_from([Message.user(""), Message.assistant("x"), user(999)]))
    assert estimate_messages([*messages, extra]) >= base + MESSAGE_TOKEN_OVERHEAD
    if messages:
        index = data.draw(st.integers(0, len(messages) - 1))
        longer = list(messages)
        longer[index] = attrs.evolve(messages[index], content=messages[index].content + "more")
        assert estimate_messages(longer) >= base
        shorter = messages[:index] + messages[index + 1 :]
        assert estimate_messages(shorter) <= base


# --------------------------------------------------------------------------- summary_inputs


def test_summary_inputs_is_one_raw_assistant_message_per_summary() -> None:
    inputs = summary_inputs(iter(["first gist", "", "third"]))
    assert isinstance(inputs, tuple)
    assert [m.content for m in inputs] == ["first gist", "", "third"]
    assert all(m.role is Role.ASSISTANT for m in inputs)
    assert all(not m.calls and not m.interrupted for m in inputs)
    assert not any(m.content.startswith(RECAP_PREFIX) for m in inputs)
    assert summary_inputs([]) == ()


def test_summary_inputs_of_a_historys_sections() -> None:
    history = three_sections()
    inputs = summary_inputs(s.summary for s in history.sections)
    assert [m.content for m in inputs] == ["first", "second", "third"]
    assert [m.content for m in history.view()[:3]] == [
        RECAP_PREFIX + "first",
        RECAP_PREFIX + "second",
        RECAP_PREFIX + "third",
    ]


def test_plan_fold_pairs_reused_call_ids_with_the_latest_open_call() -> None:
    # Providers may reuse a call id across turns (e.g. "call_0"): a result answers the latest
    # earlier call with its id that is still open.
    def call(text: str) -> Message:
        return Message.assistant(text, calls=[ToolCall("call_0", "add", {})])

    def result() -> Message:
        return Message.tool("call_0", "add", "1")

    pending = [Message.user("u"), call("a1"), result(), Message.user("u2"), call("a2")]
    assert plan_fold(pending, 0) == 4  # the second call is still running: it stays
    answered = [call("a1"), result(), Message.user("u2"), call("a2"), result()]
    assert plan_fold(answered, 1) == 3  # keep the last: its call stays with it


def test_remove_refuses_a_bare_string() -> None:
    message = Message.user("x")
    with pytest.raises(ValidationError, match="not a single string"):
        History("c").add([message]).remove(message.id)


def test_section_ids_are_unique_across_the_conversation() -> None:
    a, b = Message.user("a"), Message.user("b")
    with pytest.raises(ValidationError, match="two sections"):
        History("c", sections=[Section("s", "x", [a]), Section("s", "y", [b])])
    with pytest.raises(ValidationError, match="two messages"):
        History("c", messages=[b], sections=[Section(b.id, "x", [a])])


def test_add_builds_the_same_value_as_the_constructor() -> None:
    # add() takes a fast path (it checks only the new ids): the value must not differ from one
    # validated whole, and must go on refusing duplicates across sections and the tail.
    first, second, third = Message.user("a"), Message.user("b"), Message.user("c")
    history = History("c").add([first, second]).fold(1, "s").add([third])
    assert history == History("c", messages=[second, third], sections=history.sections)
    assert history.add([]) is history
    for clash in (first, third):
        with pytest.raises(ValidationError, match="two messages"):
            history.add([clash])
    with pytest.raises(ValidationError, match="two messages"):
        history.add([Message.user("d", id="x"), Message.user("e", id="x")])


def test_unanswered_calls_pairs_results_with_the_latest_open_call() -> None:
    first = ToolCall("c1", "add", {})
    again = ToolCall("c1", "add", {"a": 1})
    other = ToolCall("c2", "mul", {})
    messages = [
        Message.assistant(calls=[first]),
        Message.tool("c1", "add", "1"),
        Message.assistant(calls=[again, other]),
        Message.tool("c2", "mul", "2"),
    ]
    assert unanswered_calls(messages) == (again,)
    assert unanswered_calls([*messages, Message.tool("c1", "add", "3")]) == ()
    assert unanswered_calls([]) == ()
