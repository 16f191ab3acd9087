"""StreamAssembler: increments in, deltas and one ProviderResult out."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols._json import dumps
from protocols.errors import ProtocolError
from protocols.messages import CUT_SHORT, Delta, FinishReason, ToolCall, Usage
from protocols.wire import CallFragment, Increment, StreamAssembler


def test_text_flows_through_as_content_deltas() -> None:
    assembler = StreamAssembler(split=False)
    assert assembler.add(Increment(content="Hel")) == [Delta("content", "Hel")]
    assert assembler.add(Increment(content="lo")) == [Delta("content", "lo")]
    assert assembler.add(Increment()) == []
    assert assembler.flush() == []
    result = assembler.result()
    assert (result.content, result.thinking, result.calls) == ("Hello", "", ())
    assert result.finish is FinishReason.STOP
    assert result.usage is None  # not reported is not zero


def test_inline_think_tags_are_split_when_asked() -> None:
    assembler = StreamAssembler()
    deltas = assembler.add(Increment(content="<think>plan</th"))
    deltas += assembler.add(Increment(content="ink>answer"))
    deltas += assembler.flush()
    assert deltas == [Delta("thinking", "plan"), Delta("content", "answer")]
    assert assembler.result().content == "answer"
    assert assembler.result().thinking == "plan"
    raw = StreamAssembler(split=False)
    raw.add(Increment(content="<think>kept</think>"))
    assert raw.result().content == "<think>kept</think>"


def test_native_thinking_is_its_own_channel_and_follows_inline_thinking() -> None:
    assembler = StreamAssembler()
    assert assembler.add(Increment(content="<think>inline</think>", thinking="native")) == [
        Delta("thinking", "inline"),
        Delta("thinking", "native"),
    ]
    assert assembler.result().thinking == "inline\n\nnative"
    only_native = StreamAssembler()
    only_native.add(Increment(thinking="a"))
    only_native.add(Increment(thinking="b"))
    assert only_native.result().thinking == "ab"


def test_interleaved_calls_assemble_by_index() -> None:
    assembler = StreamAssembler(split=False)
    assembler.add(Increment(calls=(CallFragment(0, arguments='{"a"'),)))  # id and name later
    assembler.add(Increment(calls=(CallFragment(1, "call_b", "mul", '{"x": 2'),)))
    assembler.add(Increment(calls=(CallFragment(0, "call_a", "add", ": 1}"),)))
    assembler.add(Increment(calls=(CallFragment(1, None, None, ', "y": 3}'),)))
    assembler.add(Increment(calls=(CallFragment(0, "ignored", "ignored", ""),)))
    result = assembler.result()
    assert result.calls == (
        ToolCall("call_a", "add", {"a": 1}),
        ToolCall("call_b", "mul", {"x": 2, "y": 3}),
    )
    assert result.finish is FinishReason.TOOL_CALLS


def test_missing_ids_are_minted_once() -> None:
    ids = itertools.count(1)
    assembler = StreamAssembler(mint_id=lambda: f"minted-{next(ids)}")
    assembler.add(Increment(calls=(CallFragment(3, name="noop"), CallFragment(7, name="noop"))))
    first = assembler.result()
    assert [call.id for call in first.calls] == ["minted-1", "minted-2"]
    assert assembler.result().calls == first.calls  # the same ids every time
    assert first.calls[0].arguments == {}  # no argument text means no arguments


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ('{"a": ', "malformed arguments"),
        ("[1, 2]", "are not a JSON object"),
        ('{"a": NaN}', "malformed arguments"),
    ],
)
def test_bad_arguments_are_a_protocol_error(arguments: str, problem: str) -> None:
    assembler = StreamAssembler()
    assembler.add(Increment(calls=(CallFragment(0, "c1", "add", arguments),)))
    with pytest.raises(ProtocolError, match=problem):
        assembler.result()


def test_a_call_without_a_name_is_a_protocol_error() -> None:
    assembler = StreamAssembler()
    assembler.add(Increment(calls=(CallFragment(0, "c1", None, "{}"),)))
    with pytest.raises(ProtocolError, match="tool call 0 has no name"):
        assembler.result()


def test_partial_keeps_what_is_complete_and_never_raises() -> None:
    assembler = StreamAssembler(split=False)
    assembler.add(Increment(content="Let me add"))
    assembler.add(Increment(calls=(CallFragment(0, "c1", "add", '{"a": 1}'),)))
    assembler.add(Increment(calls=(CallFragment(1, "c2", "mul", '{"x":'),)))  # cut here
    partial = assembler.partial()
    assert partial.content == "Let me add"
    assert partial.calls == (ToolCall("c1", "add", {"a": 1}),)
    assert partial.finish is FinishReason.CANCELLED
    with pytest.raises(ProtocolError):
        assembler.result()


def test_usage_finish_continuation_and_terminal_are_the_latest_reported() -> None:
    assembler = StreamAssembler()
    assert not assembler.terminal
    assembler.add(Increment(usage=Usage(10, 0), continuation={"v": 1}))
    assembler.add(Increment(usage=Usage(10, 5), finish=FinishReason.LENGTH))
    assembler.add(Increment(terminal=True, continuation={"v": 2}))
    assembler.add(Increment())  # silence does not erase anything
    assert assembler.terminal
    result = assembler.result()
    assert result.usage == Usage(10, 5)
    assert result.finish is FinishReason.LENGTH
    assert result.continuation == {"v": 2}


def test_duplicate_ids_across_indexes_are_a_protocol_error_but_partial_survives() -> None:
    assembler = StreamAssembler()
    assembler.add(Increment(calls=(CallFragment(0, "same", "a", "{}"),)))
    assembler.add(Increment(calls=(CallFragment(1, "same", "b", "{}"),)))
    with pytest.raises(ProtocolError, match="share the id 'same'"):
        assembler.result()
    assert assembler.partial().calls == (ToolCall("same", "a", {}),)


def test_flush_is_idempotent() -> None:
    assembler = StreamAssembler()
    assembler.add(Increment(content="a <"))
    assert assembler.flush() == [Delta("content", "<")]
    assert assembler.flush() == []


texts = st.lists(st.sampled_from(["a", "é", " ", "<think>", "</think>", "<", "t"]), max_size=6).map(
    "".join
)


@settings(max_examples=150)
@given(pieces=st.lists(texts, max_size=12), split=st.booleans())
def test_deltas_add_up_to_the_result(pieces: list[str], split: bool) -> None:
    assembler = StreamAssembler(split=split)
    deltas: list[Delta] = []
    for piece in pieces:
        deltas += assembler.add(Increment(content=piece))
    deltas += assembler.flush()
    result = assembler.result()
    assert all(delta.text for delta in deltas)
    if not split:
        assert result.content == "".join(pieces)
    reclassified = split and assembler._splitter is not None and assembler._splitter.reclassified
    if not reclassified:
        assert "".join(d.text for d in deltas if d.channel == "content") == result.content
        assert "".join(d.text for d in deltas if d.channel == "thinking") == result.thinking


@settings(max_examples=150)
@given(
    calls=st.lists(
        st.dictionaries(st.sampled_from("abc"), st.integers(-5, 5), max_size=3), max_size=4
    ),
    data=st.data(),
)
def test_any_fragmentation_of_call_arguments_assembles_the_same(
    calls: list[dict[str, int]], data: st.DataObject
) -> None:
    from protocols._json import dumps

    fragments: list[CallFragment] = []
    for index, arguments in enumerate(calls):
        text = dumps(arguments)
        cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=4)))
        bounds = [0, *cuts, len(text)]
        pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
        fragments += [CallFragment(index, f"c{index}", "f", piece) for piece in pieces]
    # Interleave the calls' fragments while keeping each call's own order.
    order = data.draw(st.permutations(range(len(fragments))))
    by_call: dict[int, list[CallFragment]] = {}
    for fragment in fragments:
        by_call.setdefault(fragment.index, []).append(fragment)
    queues = {index: list(items) for index, items in by_call.items()}
    assembler = StreamAssembler()
    for position in order:
        index = fragments[position].index
        assembler.add(Increment(calls=(queues[index].pop(0),)))
    result = assembler.result()
    assert [call.arguments for call in result.calls] == calls


@pytest.mark.parametrize("split", [True, False])
def test_a_plain_string_is_content_only(split: bool) -> None:
    # Readers may hand over a record of content only as its text: Increment(content=text).
    assembler = StreamAssembler(split=split)
    assert assembler.add("") == []
    assert assembler.add("Hel") == [Delta("content", "Hel")]
    assert assembler.add(Increment(content="lo")) == [Delta("content", "lo")]
    assembler.flush()
    assert assembler.result().content == "Hello"


def test_the_first_acceptable_model_and_response_id_are_kept() -> None:
    assembler = StreamAssembler()
    assert assembler.add(Increment(content="a", model="", response_id="x" * 257)) == [
        Delta("content", "a")
    ]
    assert (assembler.model, assembler.response_id) == (None, None)  # dropped, not an error
    assembler.add(Increment(model="gpt-4.1"))
    assembler.add(Increment(response_id="resp_1", model="other"))
    assembler.add(Increment(response_id="resp_2", terminal=True))
    assembler.flush()
    assert (assembler.model, assembler.response_id) == ("gpt-4.1", "resp_1")
    result = assembler.result()
    assert (result.model, result.response_id) == ("gpt-4.1", "resp_1")
    partial = assembler.partial()
    assert (partial.model, partial.response_id) == ("gpt-4.1", "resp_1")


def test_a_stream_that_names_nothing_has_no_model_or_response_id() -> None:
    assembler = StreamAssembler()
    assembler.add("text")
    assembler.add(Increment(finish=FinishReason.STOP, terminal=True))
    assembler.flush()
    result = assembler.result()
    assert (result.model, result.response_id) == (None, None)


def test_nothing_after_a_final_increment_changes_the_result() -> None:
    """The assembler holds every reader to the end of the response: after a final increment it
    ignores every increment -- text, thinking, calls, usage, finish, names, continuation."""
    usage = Usage(prompt=3, completion=2)
    baseline = StreamAssembler()
    for increment in (
        Increment(content="Hi", model="m", response_id="r"),
        Increment(usage=usage, finish=FinishReason.STOP, terminal=True, final=True),
    ):
        baseline.add(increment)
    assert (baseline.terminal, baseline.final) == (True, True)
    after = (
        "more text",
        Increment(
            content="<think>x</think>y",
            thinking="t",
            calls=(CallFragment(0, "c", "f", "{}"),),
            usage=Usage(prompt=99, completion=99),
            finish=FinishReason.LENGTH,
            terminal=True,
            final=True,
            continuation={"k": 1},
            model="other",
            response_id="other",
        ),
    )
    for increment in after:
        assert baseline.add(increment) == []
    baseline.flush()
    result = baseline.result()
    assert (result.content, result.thinking, result.calls) == ("Hi", "", ())
    assert (result.usage, result.finish, result.continuation) == (usage, FinishReason.STOP, {})
    assert (result.model, result.response_id) == ("m", "r")


def test_a_terminal_increment_that_is_not_final_leaves_the_stream_open() -> None:
    """OpenAI chat's finish reason: the stream may end there, but a usage chunk still counts."""
    assembler = StreamAssembler()
    assembler.add(Increment(content="Hi", finish=FinishReason.STOP, terminal=True))
    assert (assembler.terminal, assembler.final) == (True, False)
    assembler.add(Increment(usage=Usage(prompt=1, completion=1)))
    assert assembler.result().usage == Usage(prompt=1, completion=1)


# -- a reply the provider cut short (issue 23 item 3) --------------------------------------------

CUT = [FinishReason.LENGTH, FinishReason.CONTENT_FILTER]


@pytest.mark.parametrize("finish", CUT)
def test_a_reply_cut_short_keeps_its_cut_call_and_refuses_every_call(
    finish: FinishReason,
) -> None:
    assembler = StreamAssembler(split=False)
    assembler.add(Increment(calls=(CallFragment(0, "c0", "add", '{"a": 1, "b": 2}'),)))
    assembler.add(Increment(calls=(CallFragment(1, "c1", "add", '{"a": 1'),)))  # cut here
    assembler.add(Increment(calls=(CallFragment(2, "c2", None, '{"a"'),)))  # no name yet
    assembler.add(Increment(finish=finish, terminal=True))
    result = assembler.result()
    assert result.finish is finish
    # The cut call is kept (to be answered) with what parsed of it: nothing; the nameless one
    # cannot be answered and is left out.
    assert result.calls == (
        ToolCall("c0", "add", {"a": 1, "b": 2}),
        ToolCall("c1", "add", {}),
    )
    assert result.denied == {"c0": CUT_SHORT[finish], "c1": CUT_SHORT[finish]}


def test_a_reply_that_was_not_cut_short_still_refuses_malformed_arguments() -> None:
    for finish in (FinishReason.STOP, FinishReason.TOOL_CALLS, FinishReason.OTHER, None):
        assembler = StreamAssembler(split=False)
        assembler.add(Increment(calls=(CallFragment(0, "c0", "add", '{"a": 1'),)))
        assembler.add(Increment(finish=finish, terminal=True))
        with pytest.raises(ProtocolError, match="malformed arguments"):
            assembler.result()
    complete = StreamAssembler(split=False)
    complete.add(Increment(calls=(CallFragment(0, "c0", "add", "{}"),), terminal=True))
    assert complete.result().denied == {}


@settings(max_examples=200)
@given(
    arguments=st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=8), max_size=4),
    at=st.integers(min_value=0),
    finish=st.sampled_from(CUT),
)
def test_a_cut_anywhere_in_the_arguments_never_raises_and_never_lets_a_call_run(
    arguments: dict[str, object], at: int, finish: FinishReason
) -> None:
    text = dumps(arguments)
    cut = text[: at % (len(text) + 1)]
    assembler = StreamAssembler(split=False)
    assembler.add(Increment(calls=(CallFragment(0, "c0", "lookup", cut),)))
    assembler.add(Increment(finish=finish, terminal=True))
    result = assembler.result()
    (call,) = result.calls
    assert call.arguments in ({}, arguments) or cut.strip() == ""
    assert result.denied == {"c0": CUT_SHORT[finish]}
