"""Tests for protocols.simulator: the offline simulator's answering policy and the three wire
formats it writes, checked against our own client code -- each vendor's request encoder, the SSE
and NDJSON decoders, the vendor stream readers with the StreamAssembler (as the HTTP engine
combines them), and the one-shot response readers.

Expected answers are derived from the policy in the simulator's module docstring, never copied
from a run of the code. Tests marked ``BUG`` expose defects of protocols/simulator.py and fail
until it is fixed.
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols._json import dumpb, dumps, loads
from protocols.budget import estimate_tokens
from protocols.errors import ValidationError
from protocols.messages import (
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolCall,
    ToolDefinition,
    Usage,
)
from protocols.ndjson import NDJSONDecoder
from protocols.simulator import (
    MAX_COUNT_TO,
    MEDIA_TYPES,
    ROUTES,
    SimAnswer,
    SimCall,
    SimRequest,
    SimTurn,
    ThinkStyle,
    Vendor,
    answer,
    error_body,
    parse_request,
    response_body,
    stream_frames,
)
from protocols.sse import SSEDecoder, SSEEvent
from protocols.wire import Increment, StreamAssembler, anthropic, ollama, openai_chat

MODEL = "sim-model"
VENDORS: tuple[Vendor, ...] = ("openai", "anthropic", "ollama")
STYLES: tuple[ThinkStyle, ...] = ("tags", "field")
#: Every vendor, and the OpenAI format once per think style.
FORMATS: list[tuple[Vendor, ThinkStyle]] = [
    ("openai", "tags"),
    ("openai", "field"),
    ("anthropic", "tags"),
    ("ollama", "tags"),
]
FORMAT_IDS = ["openai-tags", "openai-field", "anthropic", "ollama"]

#: Inline ``<think>`` splitting per vendor, as the HTTP providers configure their assembler
#: (``AnthropicMessages`` turns it off: Anthropic reports reasoning natively).
SPLIT: dict[Vendor, bool] = {"openai": True, "anthropic": False, "ollama": True}

ADD = ToolDefinition(
    "add",
    "Add two integers.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)
LOOKUP = ToolDefinition(
    "lookup",
    "Look something up.",
    {"type": "object", "properties": {"city": {"type": "string"}}},
)
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()


# ---------------------------------------------------------------------------------------------
# Our client code, driven purely


def encode(
    vendor: Vendor,
    messages: Sequence[Message],
    *,
    tools: Sequence[ToolDefinition] = (),
    options: ProviderOptions | None = None,
    stream: bool = True,
) -> bytes:
    """The request body our client sends for ``vendor``, serialised as it goes on the wire."""
    if vendor == "openai":
        body = openai_chat.encode_request(
            messages, model=MODEL, tools=tools, options=options, stream=stream
        )
    elif vendor == "anthropic":
        body = anthropic.encode_request(
            messages, model=MODEL, tools=tools, options=options, stream=stream
        )
    else:
        body = ollama.encode_request(
            messages, model=MODEL, tools=tools, options=options, stream=stream
        )
    return dumpb(body)


def new_reader(vendor: Vendor) -> Callable[[Any], Any]:
    """A fresh stream reader's ``read`` for ``vendor`` (one per stream): it returns an
    :class:`Increment`, or a plain ``str`` standing for ``Increment(content=text)``."""
    if vendor == "openai":
        return openai_chat.OpenAIChatReader().read
    if vendor == "anthropic":
        return anthropic.AnthropicReader().read
    return ollama.OllamaReader().read


def drive(vendor: Vendor, chunks: Iterable[bytes]) -> tuple[ProviderResult, list[Increment]]:
    """Bytes -> framing decoder -> vendor reader -> StreamAssembler, as ``_HTTPStream`` does:
    the decoder is chosen by the simulator's media type, SSE comments are skipped, the decoder is
    closed at the end of the body, the assembler flushed and required to be terminal."""
    decoder: SSEDecoder | NDJSONDecoder
    decoder = SSEDecoder() if MEDIA_TYPES[vendor] == "text/event-stream" else NDJSONDecoder()
    read = new_reader(vendor)
    # Ollama sends no call ids: mint them deterministically, so equal streams give equal results.
    minted = itertools.count()
    assembler = StreamAssembler(split=SPLIT[vendor], mint_id=lambda: f"minted_{next(minted)}")
    increments: list[Increment] = []

    def take(items: Sequence[Any]) -> None:
        for item in items:
            if isinstance(item, SSEEvent) or isinstance(decoder, NDJSONDecoder):
                output = read(item)
                assembler.add(output)  # as the engine does: the reader's output, unchanged
                if isinstance(output, str):  # the readers' shorthand for content only
                    output = Increment(content=output)
                assert isinstance(output, Increment)
                increments.append(output)

    for chunk in chunks:
        take(decoder.feed(chunk))
    take(decoder.close())
    assembler.flush()
    assert assembler.terminal, "the stream lacks the vendor's terminal record"
    return assembler.result(), increments


def read_body(vendor: Vendor, body: dict[str, Any]) -> ProviderResult:
    """A one-shot response body, sent through JSON as on the wire, read by our client."""
    wire = loads(dumpb(body))
    if vendor == "openai":
        return openai_chat.read_response(wire)
    if vendor == "anthropic":
        return anthropic.read_response(wire)
    return ollama.read_response(wire)


def calls_of(result: ProviderResult | SimAnswer) -> list[tuple[str, dict[str, Any]]]:
    return [(call.name, call.arguments) for call in result.calls]


def assert_same(result: ProviderResult, expected: SimAnswer, *, usage: bool = True) -> None:
    """What the client read equals what the simulator said."""
    assert result.content == expected.text
    assert result.thinking == expected.thinking
    assert calls_of(result) == calls_of(expected)
    assert result.finish is expected.finish
    if usage:
        assert result.usage == expected.usage
    else:
        assert result.usage is None


def streamed(request: SimRequest, *, seq: int = 0, style: ThinkStyle = "tags") -> ProviderResult:
    result = answer(request)
    frames = b"".join(stream_frames(request, result, seq=seq, think_style=style))
    return drive(request.vendor, [frames])[0]


def round_trip(
    vendor: Vendor,
    messages: Sequence[Message],
    *,
    tools: Sequence[ToolDefinition] = (),
    options: ProviderOptions | None = None,
    style: ThinkStyle = "tags",
) -> SimAnswer:
    """Encode the request both streamed and not, parse it, answer it, and check that the streamed
    frames and the one-shot body both read back (through our client) as that answer."""
    answers: list[SimAnswer] = []
    for stream in (True, False):
        body = encode(vendor, messages, tools=tools, options=options, stream=stream)
        request = parse_request(vendor, body)
        assert request.vendor == vendor
        assert request.model == MODEL
        assert request.stream is stream
        result = answer(request)
        answers.append(result)
        if stream:
            frames = b"".join(stream_frames(request, result, seq=3, think_style=style))
            got, _ = drive(vendor, [frames])
        else:
            got = read_body(vendor, response_body(request, result, seq=3, think_style=style))
        assert_same(got, result)
    # Whether the answer is streamed does not change what is said.
    assert answers[0] == answers[1]
    return answers[0]


def think_options(
    vendor: Vendor, extra: dict[str, Any] | None = None, **kwargs: Any
) -> ProviderOptions:
    """Options that ask ``vendor`` for reasoning the way our client can: Anthropic ``think``
    (with room for the budget), Ollama ``think``, OpenAI-compatible through ``extra``."""
    if vendor == "anthropic":
        return ProviderOptions(think=True, max_tokens=4000, **kwargs)
    if vendor == "ollama":
        return ProviderOptions(think=True, **kwargs)
    return ProviderOptions(extra=extra or {"reasoning_effort": "low"}, **kwargs)


def words(pieces: Sequence[str]) -> list[str]:
    """Each delta is one word (leading whitespace allowed): the words, checked to be single."""
    out = []
    for piece in pieces:
        assert piece
        assert len(piece.split()) == 1, piece
        out.append(piece.strip())
    return out


def user(text: str) -> list[Message]:
    return [Message.user(text)]


# ---------------------------------------------------------------------------------------------
# Constants agree with the client side


def test_routes_are_the_client_endpoints() -> None:
    # OpenAI's PATH is relative to a base URL ending in /v1.
    assert ROUTES["/v1" + openai_chat.PATH] == "openai"
    assert ROUTES[anthropic.PATH] == "anthropic"
    assert ROUTES[ollama.PATH] == "ollama"
    assert set(ROUTES.values()) == set(VENDORS)


def test_media_types_match_the_framing() -> None:
    assert MEDIA_TYPES == {
        "openai": "text/event-stream",
        "anthropic": "text/event-stream",
        "ollama": "application/x-ndjson",
    }


def test_answer_text_is_the_pieces_joined() -> None:
    sim = SimAnswer(
        thinking="",
        pieces=("a", " b", " c"),
        calls=(),
        finish=FinishReason.STOP,
        usage=Usage(prompt=1, completion=3),
    )
    assert sim.text == "a b c"


# ---------------------------------------------------------------------------------------------
# Round trips through our own client code, per policy rule


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_plain_text_is_echoed_one_word_per_delta(vendor: Vendor, style: ThinkStyle) -> None:
    messages = [Message.system("Be brief."), Message.user("  Hello there,\nsimulator!  ")]
    sim = round_trip(vendor, messages, style=style)
    assert sim.text == "You said: Hello there,\nsimulator!"
    assert words(sim.pieces) == ["You", "said:", "Hello", "there,", "simulator!"]
    assert sim.calls == ()
    assert sim.thinking == ""
    assert sim.finish is FinishReason.STOP


@pytest.mark.parametrize("vendor", VENDORS)
def test_images_are_ignored_like_a_text_only_model(vendor: Vendor) -> None:
    sim = round_trip(vendor, [Message.user("look at this", images=[PNG])])
    assert sim.text == "You said: look at this"


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_count_to_n_gives_one_number_per_delta(vendor: Vendor, style: ThinkStyle) -> None:
    sim = round_trip(vendor, user("Please count to 12."), style=style)
    assert words(sim.pieces) == [str(i) for i in range(1, 13)]
    assert sim.text == " ".join(str(i) for i in range(1, 13))
    assert sim.finish is FinishReason.STOP


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_sums_without_an_add_tool_are_answered(vendor: Vendor, style: ThinkStyle) -> None:
    sim = round_trip(vendor, user("What is 19 + 23?"), tools=[LOOKUP], style=style)
    assert sim.text == "19 + 23 = 42."
    assert sim.calls == ()
    two = round_trip(vendor, user("What is 19 + 23 and 100 + -1?"), style=style)
    first, second = two.text.index("19 + 23 = 42."), two.text.index("100 + -1 = 99.")
    assert first < second
    assert two.calls == ()


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_sums_with_an_add_tool_call_it_once_per_sum(vendor: Vendor, style: ThinkStyle) -> None:
    one = round_trip(vendor, user("What is 19 + 23?"), tools=[ADD, LOOKUP], style=style)
    assert calls_of(one) == [("add", {"a": 19, "b": 23})]
    assert one.pieces == ()
    assert one.finish is FinishReason.TOOL_CALLS
    two = round_trip(vendor, user("Add 19 + 23, then 7 + -2?"), tools=[ADD], style=style)
    assert calls_of(two) == [("add", {"a": 19, "b": 23}), ("add", {"a": 7, "b": -2})]
    assert two.finish is FinishReason.TOOL_CALLS


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_call_tool_with_json_calls_it_with_those_arguments(
    vendor: Vendor, style: ThinkStyle
) -> None:
    text = 'Please call lookup with {"city": "Paris", "days": 3}, then call add; call nothing'
    sim = round_trip(vendor, user(text), tools=[ADD, LOOKUP], style=style)
    # `nothing` is not an advertised tool: its mention is not a call.
    assert calls_of(sim) == [("lookup", {"city": "Paris", "days": 3}), ("add", {})]
    assert sim.finish is FinishReason.TOOL_CALLS
    example = round_trip(vendor, user('call add with {"a": 1, "b": 2}'), tools=[ADD])
    assert calls_of(example) == [("add", {"a": 1, "b": 2})]


def test_decimals_are_not_read_as_integer_sums() -> None:
    for tools in ((), ("add",)):
        request = SimRequest("openai", MODEL, (SimTurn("user", "what is 1.5 + 2.5?"),), tools)
        sim = answer(request)
        assert sim.calls == ()
        assert sim.text == "You said: what is 1.5 + 2.5?"  # not "5 + 2 = 7."


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_sum_ending_a_sentence_is_still_a_sum(vendor: Vendor) -> None:
    # BUG (minor): _SUM ends with the lookahead (?![\w.]) -- meant to keep "1.5 + 2.5" from
    # reading as "5 + 2" -- which also rejects a sum followed by a full stop: "What is 7 + 2."
    # is echoed ("You said: What is 7 + 2.") and, with an add tool, makes no call.
    sim = round_trip(vendor, user("What is 7 + 2."))
    assert sim.text == "7 + 2 = 9."
    with_tool = round_trip(vendor, user("What is 7 + 2."), tools=[ADD])
    assert calls_of(with_tool) == [("add", {"a": 7, "b": 2})]


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_call_ending_a_sentence_is_still_a_call(vendor: Vendor) -> None:
    # BUG (minor): _CALL captures the tool name as [A-Za-z_][\w.-]*, so the full stop of
    # "Please call add." becomes part of the name ("add."), which is not an advertised tool: the
    # text is echoed instead of calling add.
    sim = round_trip(vendor, user("Please call add."), tools=[ADD])
    assert calls_of(sim) == [("add", {})]


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_call_to_an_unadvertised_tool_is_just_text(vendor: Vendor) -> None:
    sim = round_trip(vendor, user("call lookup"), tools=[ADD])
    assert sim.calls == ()
    assert sim.text == "You said: call lookup"


def tool_conversation(results: Sequence[str]) -> list[Message]:
    calls = [ToolCall(f"call_{i}", "add", {"a": i, "b": 1}) for i in range(len(results))]
    return [
        Message.user("Add some numbers."),
        Message.assistant(calls=calls),
        *(
            Message.tool(call.id, call.name, content)
            for call, content in zip(calls, results, strict=True)
        ),
    ]


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_one_tool_result_is_reported(vendor: Vendor, style: ThinkStyle) -> None:
    sim = round_trip(vendor, tool_conversation(["42"]), tools=[ADD], style=style)
    assert sim.text == "The answer is 42."
    assert sim.calls == ()
    assert sim.finish is FinishReason.STOP


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_several_tool_results_are_listed(vendor: Vendor, style: ThinkStyle) -> None:
    sim = round_trip(vendor, tool_conversation(["1", "2", "3"]), tools=[ADD], style=style)
    assert sim.text == "The tools returned: 1, 2, 3."
    assert sim.calls == ()


THINK_EXTRAS: list[dict[str, Any]] = [
    {"reasoning_effort": "low"},
    {"chat_template_kwargs": {"enable_thinking": True}},
]

THINK_CASES: list[tuple[Vendor, ThinkStyle, dict[str, Any] | None]] = [
    ("openai", style, extra) for style in STYLES for extra in THINK_EXTRAS
] + [("anthropic", "tags", None), ("ollama", "tags", None)]


@pytest.mark.parametrize(("vendor", "style", "extra"), THINK_CASES)
@pytest.mark.parametrize(
    ("text", "tools"),
    [
        ("Hello there", []),
        ("count to 5", []),
        ("What is 19 + 23 and 2 + 2?", [ADD]),
        ('call lookup with {"city": "Oslo"}', [LOOKUP]),
    ],
    ids=["echo", "count", "add-calls", "call-json"],
)
def test_thinking_comes_first_and_changes_nothing_else(
    vendor: Vendor,
    style: ThinkStyle,
    extra: dict[str, Any] | None,
    text: str,
    tools: list[ToolDefinition],
) -> None:
    thinking = round_trip(
        vendor, user(text), tools=tools, options=think_options(vendor, extra), style=style
    )
    plain_options = ProviderOptions(max_tokens=4000) if vendor == "anthropic" else None
    plain = round_trip(vendor, user(text), tools=tools, options=plain_options, style=style)
    assert thinking.thinking.strip()
    assert plain.thinking == ""
    assert thinking.pieces == plain.pieces
    assert thinking.calls == plain.calls
    assert thinking.finish is plain.finish
    # The thinking text is counted as output.
    extra_tokens = thinking.usage.completion - plain.usage.completion
    assert extra_tokens == estimate_tokens(thinking.thinking)
    for call in thinking.calls:  # it says what it is about to do
        assert call.name in thinking.thinking


@pytest.mark.parametrize(
    "extra",
    [
        {"reasoning_effort": "none"},
        {"reasoning_effort": "minimal"},
        {"chat_template_kwargs": {"enable_thinking": False}},
        {},
    ],
)
def test_openai_reasoning_switched_off_gives_no_thinking(extra: dict[str, Any]) -> None:
    sim = round_trip("openai", user("hi"), options=ProviderOptions(extra=extra))
    assert sim.thinking == ""


def test_openai_think_styles_write_tags_or_the_reasoning_field() -> None:
    request = parse_request(
        "openai",
        encode("openai", user("hi"), options=think_options("openai"), stream=False),
    )
    sim = answer(request)
    tags = response_body(request, sim, think_style="tags")["choices"][0]["message"]
    assert tags["content"] == f"<think>{sim.thinking}</think>{sim.text}"
    assert "reasoning_content" not in tags
    field = response_body(request, sim, think_style="field")["choices"][0]["message"]
    assert field["content"] == sim.text
    assert field["reasoning_content"] == sim.thinking
    markers: tuple[tuple[ThinkStyle, bytes, bytes], ...] = (
        ("tags", b"<think>", b"reasoning_content"),
        ("field", b"reasoning_content", b"<think>"),
    )
    for style, marker, other in markers:
        frames = b"".join(stream_frames(request, sim, think_style=style))
        assert marker in frames
        assert other not in frames


def test_anthropic_thinking_is_signed_and_kept_for_replay() -> None:
    messages = user("What is 19 + 23?")
    options = think_options("anthropic")
    results = []
    for stream in (True, False):
        request = parse_request(
            "anthropic", encode("anthropic", messages, tools=[ADD], options=options, stream=stream)
        )
        sim = answer(request)
        if stream:
            result = drive("anthropic", stream_frames(request, sim))[0]
        else:
            result = read_body("anthropic", response_body(request, sim))
        blocks = result.continuation["anthropic"]["thinking_blocks"]
        assert len(blocks) == 1
        assert blocks[0]["thinking"] == sim.thinking
        assert isinstance(blocks[0]["signature"], str)
        assert blocks[0]["signature"]
        results.append(result)
    # The same thinking carries the same signature either way.
    assert results[0].continuation == results[1].continuation


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_whole_tool_loop_through_the_simulator(vendor: Vendor) -> None:
    """Ask, get parallel add calls (with thinking), run them, send the results back (with any
    vendor continuation), get the answer."""
    messages = user("What is 19 + 23 and 1 + 2?")
    options = think_options(vendor)
    request = parse_request(vendor, encode(vendor, messages, tools=[ADD], options=options))
    first = streamed(request, seq=0)
    assert calls_of(first) == [("add", {"a": 19, "b": 23}), ("add", {"a": 1, "b": 2})]
    assert first.thinking
    messages.append(
        Message.assistant(
            first.content,
            calls=first.calls,
            thinking=first.thinking,
            continuation=first.continuation,
        )
    )
    for call in first.calls:
        total = call.arguments["a"] + call.arguments["b"]
        messages.append(Message.tool(call.id, call.name, str(total)))
    body = encode(vendor, messages, tools=[ADD], options=options, stream=False)
    request = parse_request(vendor, body)
    second = read_body(vendor, response_body(request, answer(request), seq=1))
    assert second.content == "The tools returned: 42, 3."
    assert second.calls == ()
    assert second.finish is FinishReason.STOP


# -- tool_choice


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_tool_choice_none_hides_the_tools(vendor: Vendor) -> None:
    options = ProviderOptions(tool_choice="none")
    sim = round_trip(vendor, user("What is 19 + 23?"), tools=[ADD], options=options)
    assert sim.calls == ()
    assert sim.text == "19 + 23 = 42."
    explicit = round_trip(vendor, user("call add"), tools=[ADD], options=options)
    assert explicit.calls == ()


def test_ollama_tool_choice_none_leaves_the_tools_out() -> None:
    options = ProviderOptions(tool_choice="none")
    sim = round_trip("ollama", user("What is 19 + 23?"), tools=[ADD], options=options)
    assert sim.text == "19 + 23 = 42."
    assert sim.calls == ()
    request = parse_request("ollama", encode("ollama", user("x"), tools=[ADD], options=options))
    assert request.tools == ()
    offered = parse_request("ollama", encode("ollama", user("x"), tools=[ADD, LOOKUP]))
    assert offered.tools == ("add", "lookup")


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_tool_choice_required_with_nothing_to_call_calls_the_first_tool(vendor: Vendor) -> None:
    options = ProviderOptions(tool_choice="required")
    sim = round_trip(vendor, user("Hello"), tools=[LOOKUP, ADD], options=options)
    assert calls_of(sim) == [("lookup", {})]
    assert sim.finish is FinishReason.TOOL_CALLS
    # With something to call, that is what is called.
    sums = round_trip(vendor, user("2 + 3"), tools=[LOOKUP, ADD], options=options)
    assert calls_of(sums) == [("add", {"a": 2, "b": 3})]


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_tool_choice_name_restricts_to_that_tool(vendor: Vendor) -> None:
    options = ProviderOptions(tool_choice="lookup")
    # `add` is hidden, so the sum cannot become an add call: the named tool is called with {}.
    sim = round_trip(vendor, user("What is 19 + 23?"), tools=[ADD, LOOKUP], options=options)
    assert calls_of(sim) == [("lookup", {})]
    text = 'call add with {"a": 1, "b": 2} and call lookup with {"city": "Rome"}'
    both = round_trip(vendor, user(text), tools=[ADD, LOOKUP], options=options)
    assert calls_of(both) == [("lookup", {"city": "Rome"})]


# -- output cap


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
@pytest.mark.parametrize("cap", [1, 3, 9])
def test_an_output_cap_cuts_the_answer_to_that_many_deltas(
    vendor: Vendor, style: ThinkStyle, cap: int
) -> None:
    options = ProviderOptions(max_tokens=cap)
    sim = round_trip(vendor, user("count to 10"), options=options, style=style)
    assert words(sim.pieces) == [str(i) for i in range(1, cap + 1)]
    assert sim.finish is FinishReason.LENGTH
    assert sim.usage.completion == cap


def test_openai_max_completion_tokens_is_a_cap_too() -> None:
    options = ProviderOptions(extra={"max_completion_tokens": 2})
    sim = round_trip("openai", user("count to 10"), options=options)
    assert words(sim.pieces) == ["1", "2"]
    assert sim.finish is FinishReason.LENGTH


@pytest.mark.parametrize("vendor", VENDORS)
def test_a_cap_that_is_not_smaller_than_the_answer_cuts_nothing(vendor: Vendor) -> None:
    for cap in (5, 6):
        sim = round_trip(vendor, user("count to 5"), options=ProviderOptions(max_tokens=cap))
        assert words(sim.pieces) == ["1", "2", "3", "4", "5"]
        assert sim.finish is FinishReason.STOP


@pytest.mark.parametrize("vendor", VENDORS)
def test_calls_finish_as_tool_calls_even_under_a_cap(vendor: Vendor) -> None:
    options = ProviderOptions(max_tokens=1)
    sim = round_trip(vendor, user("19 + 23 and 1 + 1"), tools=[ADD], options=options)
    assert len(sim.calls) == 2
    assert sim.finish is FinishReason.TOOL_CALLS


# -- count clamp


def test_count_to_n_clamps_at_max_count_to() -> None:
    # The biggest N the pattern reads (12 digits); answer() only, no million frames streamed.
    request = SimRequest("ollama", MODEL, (SimTurn("user", "count to 999999999999"),))
    sim = answer(request)
    assert len(sim.pieces) == MAX_COUNT_TO
    assert sim.pieces[0] == "1"
    assert sim.pieces[-1] == f" {MAX_COUNT_TO}"


def test_count_to_a_thirteen_digit_n_clamps_too() -> None:
    # BUG (minor): MAX_COUNT_TO is documented as "the largest N honoured by count to N (bigger
    # requests count to this)", but _COUNT only matches up to 12 digits, so a 13-digit N is not a
    # count request at all and the text is echoed ("You said: count to 10000000000000").
    request = SimRequest("ollama", MODEL, (SimTurn("user", f"count to {10**13}"),))
    sim = answer(request)
    assert len(sim.pieces) == MAX_COUNT_TO
    assert sim.pieces[-1] == f" {MAX_COUNT_TO}"


# ---------------------------------------------------------------------------------------------
# The streams' shape


def frames_for(
    vendor: Vendor, text: str, tools: Sequence[ToolDefinition] = (), style: ThinkStyle = "tags"
) -> tuple[SimRequest, SimAnswer, list[bytes]]:
    body = encode(vendor, user(text), tools=tools, options=think_options(vendor))
    request = parse_request(vendor, body)
    sim = answer(request)
    return request, sim, list(stream_frames(request, sim, seq=1, think_style=style))


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_every_frame_is_one_complete_record(vendor: Vendor, style: ThinkStyle) -> None:
    _, _, frames = frames_for(vendor, 'count to 4 and call add with {"a": 1}', [ADD], style)
    _, _, more = frames_for(vendor, "count to 4", style=style)
    for frame in frames + more:
        if vendor == "ollama":
            decoder = NDJSONDecoder()
            assert len(decoder.feed(frame)) == 1
            assert decoder.close() == []
        else:
            sse = SSEDecoder()
            items = sse.feed(frame)
            assert len(items) == 1
            assert isinstance(items[0], SSEEvent)
            assert sse.close() == []


def test_anthropic_frames_have_the_documented_shape() -> None:
    """Each event's data has the fields Anthropic's streaming docs show and the official SDK's
    types require (the ``anthropic`` package is not installed here to drive it directly): a
    thinking block starts with ``"thinking": ""`` and ``"signature": ""``, a text block with
    ``"text": ""``, a tool_use block with its id, name and ``"input": {}``."""
    _, _, frames = frames_for("anthropic", 'call add with {"a": 1}', [ADD])
    _, _, more = frames_for("anthropic", "count to 2")
    records = [loads(item.data) for frame in frames + more for item in SSEDecoder().feed(frame)]
    starts = [
        record["content_block"] for record in records if record["type"] == "content_block_start"
    ]
    by_type = {block["type"]: block for block in starts}
    assert by_type["thinking"] == {"type": "thinking", "thinking": "", "signature": ""}
    assert by_type["text"] == {"type": "text", "text": ""}
    assert set(by_type["tool_use"]) == {"type", "id", "name", "input"}
    assert by_type["tool_use"]["input"] == {}
    for record in records:
        if record["type"] == "message_start":
            assert set(record["message"]) == {
                "id",
                "type",
                "role",
                "model",
                "content",
                "stop_reason",
                "stop_sequence",
                "usage",
            }
        elif record["type"] in ("content_block_start", "content_block_delta"):
            assert isinstance(record["index"], int)
        elif record["type"] == "message_delta":
            assert set(record["delta"]) == {"stop_reason", "stop_sequence"}
            assert "output_tokens" in record["usage"]


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_every_content_delta_is_its_own_frame(vendor: Vendor, style: ThinkStyle) -> None:
    _, sim, frames = frames_for(vendor, "count to 6", style=style)
    _, increments = drive(vendor, frames)
    contents = [increment.content for increment in increments if increment.content]
    thoughts = [increment.thinking for increment in increments if increment.thinking]
    if vendor == "openai" and style == "tags":
        # The thinking rides inline in the content, before the answer's deltas.
        assert "".join(contents) == f"<think>{sim.thinking}</think>{sim.text}"
        assert contents[-len(sim.pieces) :] == list(sim.pieces)
        assert thoughts == []
    else:
        assert contents == list(sim.pieces)
        assert "".join(thoughts) == sim.thinking
    assert len(sim.pieces) == 6


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_call_arguments_arrive_in_fragments_to_assemble(vendor: Vendor) -> None:
    arguments = {"city": "Llanfairpwllgwyngyll", "note": "a long enough argument value"}
    _, sim, frames = frames_for(vendor, f"call lookup with {dumps(arguments)}", [LOOKUP])
    assert calls_of(sim) == [("lookup", arguments)]
    result, increments = drive(vendor, frames)
    fragments = [f.arguments for i in increments for f in i.calls if f.arguments]
    assert len(fragments) > 1
    assert "".join(fragments) == dumps(arguments)
    assert calls_of(result) == [("lookup", arguments)]


def test_ollama_sends_each_call_whole() -> None:
    text = 'call lookup with {"city": "Oslo"} and call add with {"a": 1, "b": 2}'
    _, sim, frames = frames_for("ollama", text, [LOOKUP, ADD])
    _, increments = drive("ollama", frames)
    fragments = [f for i in increments for f in i.calls]
    assert [(f.name, loads(f.arguments)) for f in fragments] == calls_of(sim)


def test_openai_stream_ends_with_done_and_usage_only_when_asked() -> None:
    with_usage = parse_request("openai", encode("openai", user("hi")))
    assert with_usage.include_usage
    frames = list(stream_frames(with_usage, answer(with_usage)))
    assert frames[-1] == b"data: [DONE]\n\n"
    last_data = loads(frames[-2][len(b"data: ") :])
    assert last_data["choices"] == []
    assert last_data["usage"]["total_tokens"] == answer(with_usage).usage.total

    body = loads(encode("openai", user("hi")))
    del body["stream_options"]
    without = parse_request("openai", dumpb(body))
    assert without.stream
    assert not without.include_usage
    sim = answer(without)
    frames = list(stream_frames(without, sim))
    assert frames[-1] == b"data: [DONE]\n\n"
    assert b'"usage"' not in b"".join(frames)
    result, _ = drive("openai", frames)
    assert_same(result, sim, usage=False)


def test_anthropic_stream_runs_from_message_start_to_message_stop() -> None:
    _, sim, frames = frames_for("anthropic", "19 + 23", [ADD])
    events = [item for item in SSEDecoder().feed(b"".join(frames)) if isinstance(item, SSEEvent)]
    assert events[0].event == "message_start"
    assert events[-1].event == "message_stop"
    for event in events:
        assert loads(event.data)["type"] == event.event
    assert calls_of(sim) == [("add", {"a": 19, "b": 23})]


def test_ollama_stream_ends_with_one_done_record_holding_the_counts() -> None:
    _, sim, frames = frames_for("ollama", "count to 3")
    records = [loads(frame) for frame in frames]
    assert [record["done"] for record in records] == [False] * (len(records) - 1) + [True]
    assert records[-1]["prompt_eval_count"] == sim.usage.prompt
    assert records[-1]["eval_count"] == sim.usage.completion
    assert all(record["model"] == MODEL for record in records)


# ---------------------------------------------------------------------------------------------
# Chunking invariance and determinism

CHUNK_CASES: list[tuple[str, tuple[ToolDefinition, ...], bool]] = [
    ("Hello, wörld ✓ — ünïcode", (), False),
    ("count to 8", (), True),
    ("What is 19 + 23 and 5 + 5?", (ADD,), True),
    ('call lookup with {"city": "Zürich"}', (LOOKUP,), False),
]


@settings(max_examples=60, deadline=None)
@given(
    case=st.sampled_from(CHUNK_CASES),
    form=st.sampled_from(FORMATS),
    cuts=st.lists(st.floats(min_value=0, max_value=1), max_size=30),
)
def test_chunking_never_changes_the_result(
    case: tuple[str, tuple[ToolDefinition, ...], bool],
    form: tuple[Vendor, ThinkStyle],
    cuts: list[float],
) -> None:
    text, tools, think = case
    vendor, style = form
    options = think_options(vendor) if think else None
    request = parse_request(vendor, encode(vendor, user(text), tools=tools, options=options))
    sim = answer(request)
    data = b"".join(stream_frames(request, sim, seq=2, think_style=style))
    points = sorted({int(cut * len(data)) for cut in cuts} | {0, len(data)})
    chunks = [data[a:b] for a, b in itertools.pairwise(points)]
    assert b"".join(chunks) == data
    whole, _ = drive(vendor, [data])
    pieces, _ = drive(vendor, chunks)
    assert pieces == whole
    assert_same(pieces, sim)


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_chunking_byte_by_byte_gives_the_same_result(vendor: Vendor, style: ThinkStyle) -> None:
    text = 'Grüße! call lookup with {"city": "Köln"}'
    request, sim, frames = frames_for(vendor, text, [LOOKUP], style)
    data = b"".join(frames)
    whole, _ = drive(vendor, [data])
    assert drive(vendor, [data[i : i + 1] for i in range(len(data))])[0] == whole
    assert_same(whole, sim, usage=request.include_usage)


@pytest.mark.parametrize(("vendor", "style"), FORMATS, ids=FORMAT_IDS)
def test_equal_requests_give_equal_bytes(vendor: Vendor, style: ThinkStyle) -> None:
    def once() -> tuple[SimRequest, bytes, bytes]:
        # Fresh messages each time (new message ids, which the encoders do not send).
        messages = [Message.system("sys"), *tool_conversation(["4", "5"])]
        body = encode(vendor, messages, tools=[ADD], options=think_options(vendor))
        request = parse_request(vendor, body)
        sim = answer(request)
        frames = b"".join(stream_frames(request, sim, seq=7, think_style=style))
        return request, frames, dumpb(response_body(request, sim, seq=7, think_style=style))

    first, second = once(), once()
    assert first == second
    assert answer(first[0]) == answer(second[0])


def ids_of(vendor: Vendor, request: SimRequest, seq: int) -> tuple[list[str], list[str]]:
    """(response ids, call ids) of the one-shot body and the stream for ``seq``."""
    sim = answer(request)
    body = response_body(request, sim, seq=seq)
    events = SSEDecoder().feed(b"".join(stream_frames(request, sim, seq=seq)))
    datas = [loads(e.data) for e in events if isinstance(e, SSEEvent) and e.data != "[DONE]"]
    if vendor == "openai":
        message_ids = [body["id"], *(data["id"] for data in datas)]
        call_ids = [call["id"] for call in body["choices"][0]["message"]["tool_calls"]]
    else:
        starts = [data["message"] for data in datas if data["type"] == "message_start"]
        message_ids = [body["id"], *(start["id"] for start in starts)]
        call_ids = [block["id"] for block in body["content"] if block["type"] == "tool_use"]
    return message_ids, call_ids


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
def test_seq_makes_the_ids(vendor: Vendor) -> None:
    request = parse_request(vendor, encode(vendor, user("1 + 2 and 3 + 4"), tools=[ADD]))
    messages_1, calls_1 = ids_of(vendor, request, 1)
    messages_2, calls_2 = ids_of(vendor, request, 2)
    # One response id per response, used throughout its stream.
    assert len(set(messages_1)) == 1
    assert len(set(messages_2)) == 1
    assert messages_1[0] != messages_2[0]
    assert len(calls_1) == len(set(calls_1)) == 2
    assert not set(calls_1) & set(calls_2)
    # The streamed calls carry the same ids as the one-shot body.
    sim = answer(request)
    streamed_ids = [call.id for call in streamed(request, seq=1).calls]
    assert streamed_ids == calls_1
    assert calls_of(sim) == [("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})]


def test_ollama_has_no_ids_so_seq_changes_nothing() -> None:
    request = parse_request("ollama", encode("ollama", user("1 + 2"), tools=[ADD]))
    sim = answer(request)
    one = b"".join(stream_frames(request, sim, seq=1))
    two = b"".join(stream_frames(request, sim, seq=2))
    assert one == two
    assert response_body(request, sim, seq=1) == response_body(request, sim, seq=2)


@pytest.mark.parametrize("vendor", ["anthropic", "ollama"])
def test_think_style_only_concerns_openai(vendor: Vendor) -> None:
    request = parse_request(vendor, encode(vendor, user("hi"), options=think_options(vendor)))
    sim = answer(request)
    assert sim.thinking
    tags = b"".join(stream_frames(request, sim, think_style="tags"))
    field = b"".join(stream_frames(request, sim, think_style="field"))
    assert tags == field
    assert response_body(request, sim, think_style="tags") == response_body(
        request, sim, think_style="field"
    )


# ---------------------------------------------------------------------------------------------
# Reading requests: defaults and errors


def raw(**fields: Any) -> bytes:
    body: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    body.update(fields)
    return dumpb({key: value for key, value in body.items() if value is not ...})


def test_ollama_streams_unless_told_not_to() -> None:
    assert parse_request("ollama", raw()).stream is True
    assert parse_request("ollama", raw(stream=True)).stream is True
    assert parse_request("ollama", raw(stream=False)).stream is False
    assert parse_request("ollama", raw()).include_usage is True


def test_openai_does_not_stream_unless_asked() -> None:
    assert parse_request("openai", raw()).stream is False
    assert parse_request("openai", raw(stream=True)).stream is True
    assert parse_request("anthropic", raw()).stream is False
    assert parse_request("anthropic", raw(stream=True)).stream is True


def test_openai_include_usage_only_when_asked_while_streaming() -> None:
    asked = {"include_usage": True}
    assert parse_request("openai", raw(stream=True)).include_usage is False
    assert parse_request("openai", raw(stream=True, stream_options=asked)).include_usage is True
    assert parse_request("openai", raw(stream_options=asked)).include_usage is False
    off = {"include_usage": False}
    assert parse_request("openai", raw(stream=True, stream_options=off)).include_usage is False
    # Anthropic always reports usage in its stream.
    assert parse_request("anthropic", raw()).include_usage is True


def test_requests_are_read_into_turns() -> None:
    request = parse_request(
        "anthropic",
        raw(
            system="Be kind.",
            messages=[
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "x"}]},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "b"},
                        {"type": "tool_use", "id": "t1", "name": "add", "input": {"a": 1}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "1"},
                        {"type": "text", "text": "and?"},
                    ],
                },
            ],
        ),
    )
    assert request.turns == (
        SimTurn("system", "Be kind."),
        SimTurn("user", "a"),
        SimTurn("assistant", "b", (SimCall("add", {"a": 1}),)),
        SimTurn("tool", "1"),
        SimTurn("user", "and?"),
    )
    chat = parse_request(
        "openai",
        raw(
            messages=[
                {"role": "developer", "content": "Rules."},
                {"role": "user", "content": [{"type": "text", "text": "q"}]},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "add", "arguments": ""},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c", "content": "3"},
            ]
        ),
    )
    assert chat.turns == (
        SimTurn("system", "Rules."),
        SimTurn("user", "q"),
        SimTurn("assistant", "", (SimCall("add", {}),)),
        SimTurn("tool", "3"),
    )


def test_tool_choice_is_read_into_one_shape() -> None:
    function = {"type": "function", "function": {"name": "add"}}
    for value, expected in (("auto", None), ("none", "none"), ("required", "required")):
        assert parse_request("openai", raw(tool_choice=value)).tool_choice == expected
    assert parse_request("openai", raw(tool_choice=function)).tool_choice == "add"
    for kind, expected in (("auto", None), ("any", "required"), ("none", "none")):
        request = parse_request("anthropic", raw(tool_choice={"type": kind}))
        assert request.tool_choice == expected
    named = {"type": "tool", "name": "add"}
    assert parse_request("anthropic", raw(tool_choice=named)).tool_choice == "add"


def test_thinking_switches_are_read() -> None:
    enabled = {"type": "enabled", "budget_tokens": 1024}
    assert parse_request("anthropic", raw(thinking=enabled)).think is True
    assert parse_request("anthropic", raw(thinking={"type": "disabled"})).think is False
    assert parse_request("ollama", raw(think=True)).think is True
    assert parse_request("ollama", raw(think=False)).think is False
    assert parse_request("openai", raw(reasoning_effort="high")).think is True
    assert parse_request("openai", raw()).think is False


def test_output_caps_are_read() -> None:
    assert parse_request("openai", raw(max_tokens=5)).max_tokens == 5
    assert parse_request("openai", raw(max_completion_tokens=6)).max_tokens == 6
    assert parse_request("anthropic", raw(max_tokens=7)).max_tokens == 7
    assert parse_request("ollama", raw(options={"num_predict": 8})).max_tokens == 8
    assert parse_request("ollama", raw(options={"temperature": 0.5})).max_tokens is None
    assert parse_request("openai", raw()).max_tokens is None


BAD_REQUESTS: list[tuple[Vendor, bytes, str]] = [
    ("openai", b"[]", "JSON object"),
    ("anthropic", b'"text"', "JSON object"),
    ("ollama", b"42", "JSON object"),
    ("openai", dumpb({"messages": []}), "'model'"),
    ("anthropic", raw(model=""), "'model'"),
    ("ollama", raw(model=5), "'model'"),
    ("openai", raw(messages=...), "'messages'"),
    ("anthropic", raw(messages="hi"), "'messages'"),
    ("ollama", raw(messages={"role": "user"}), "'messages'"),
    ("openai", raw(messages=["hi"]), "messages[0]"),
    ("openai", raw(messages=[{"role": "robot", "content": "x"}]), "messages[0].role"),
    ("anthropic", raw(messages=[{"content": "x"}]), "messages[0].role"),
    ("ollama", raw(messages=[{"role": "user"}, {"role": 3}]), "messages[1].role"),
    ("openai", raw(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
    (
        "openai",
        raw(messages=[{"role": "user", "content": [{"type": "text", "text": 1}]}]),
        "messages[0].content[0].text",
    ),
    ("openai", raw(tools={"add": {}}), "'tools'"),
    ("openai", raw(tools=[5]), "tools[0]"),
    ("openai", raw(tools=[{"type": "function"}]), "tools[0].function"),
    ("ollama", raw(tools=[{"type": "function", "function": {"name": ""}}]), "tools[0]"),
    ("anthropic", raw(tools=[{"name": "add"}, {"input_schema": {}}]), "tools[1]"),
    ("openai", raw(tool_choice=5), "'tool_choice'"),
    ("openai", raw(tool_choice={"type": "function"}), "tool_choice.function"),
    ("anthropic", raw(tool_choice="any"), "tool_choice"),
    ("openai", raw(max_tokens=0), "max_tokens"),
    ("openai", raw(max_tokens=True), "max_tokens"),
    ("openai", raw(max_tokens="5"), "max_tokens"),
    ("openai", raw(max_completion_tokens=-1), "max_completion_tokens"),
    ("anthropic", raw(max_tokens=0), "max_tokens"),
    ("anthropic", raw(max_tokens=2.5), "max_tokens"),
    ("ollama", raw(options={"num_predict": 0}), "num_predict"),
    ("ollama", raw(options={"num_predict": False}), "num_predict"),
    (
        "openai",
        raw(
            messages=[
                {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 1}}]}
            ]
        ),
        "messages[0].tool_calls[0]",
    ),
    (
        "ollama",
        raw(messages=[{"role": "assistant", "tool_calls": [{"function": {"arguments": "[1]"}}]}]),
        "messages[0].tool_calls[0]",
    ),
]


@pytest.mark.parametrize(("vendor", "body", "field"), BAD_REQUESTS)
def test_bad_requests_raise_a_validation_error_naming_the_field(
    vendor: Vendor, body: bytes, field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_request(vendor, body)
    assert field in caught.value.message


@pytest.mark.parametrize("vendor", VENDORS)
@pytest.mark.parametrize("body", [b"not json", b"", b"\xff\xfe", b'{"model": "m",'])
def test_a_body_that_is_not_json_raises_a_validation_error(vendor: Vendor, body: bytes) -> None:
    # BUG: parse_request wraps loads() in `except ValueError`, but protocols._json.loads raises
    # ProtocolError, which is not a ValueError: the ProtocolError escapes, and the simulator
    # server (which answers only ValidationError with a 400) fails the request instead.
    with pytest.raises(ValidationError) as caught:
        parse_request(vendor, body)
    assert "JSON" in caught.value.message


@pytest.mark.parametrize("vendor", ["openai", "ollama"])
@pytest.mark.parametrize("tool_calls", [5, True])
def test_tool_calls_that_are_not_a_list_raise_a_validation_error(
    vendor: Vendor, tool_calls: Any
) -> None:
    # BUG: _chat_turns iterates `message.get("tool_calls") or ()`, so a number or `true` raises
    # TypeError ("'int' object is not iterable") instead of a ValidationError naming the field.
    body = raw(messages=[{"role": "assistant", "content": "", "tool_calls": tool_calls}])
    with pytest.raises(ValidationError) as caught:
        parse_request(vendor, body)
    assert "tool_calls" in caught.value.message


def test_tool_call_arguments_that_are_not_json_raise_a_validation_error() -> None:
    # BUG: _arguments wraps loads() in `except ValueError`; loads raises ProtocolError, which
    # escapes instead of the documented ValidationError naming the field.
    call = {"id": "c", "type": "function", "function": {"name": "add", "arguments": "{oops"}}
    body = raw(messages=[{"role": "assistant", "content": None, "tool_calls": [call]}])
    with pytest.raises(ValidationError) as caught:
        parse_request("openai", body)
    assert "messages[0].tool_calls[0]" in caught.value.message


@pytest.mark.parametrize("vendor", VENDORS)
def test_call_with_malformed_json_still_calls_the_tool(vendor: Vendor) -> None:
    # BUG: answer() is documented never to raise for a parsed request, and `{a: 1}` is not a JSON
    # object, so this is a plain `call add` (arguments {}). But _calls_for wraps loads() in
    # `except ValueError` and loads raises ProtocolError, so answer() raises it.
    request = parse_request(vendor, encode(vendor, user("call add with {a: 1}"), tools=[ADD]))
    sim = answer(request)
    assert calls_of(sim) == [("add", {})]


# ---------------------------------------------------------------------------------------------
# The policy's invariants over arbitrary requests

ROLES: tuple[Literal["system", "user", "assistant", "tool"], ...] = (
    "system",
    "user",
    "assistant",
    "tool",
)
TOOL_NAMES = ("add", "lookup", "search")
FRAGMENTS = st.sampled_from(
    [
        "hello",
        "what",
        "is",
        "and",
        "count to 7",
        "count to 0",
        "19 + 23",
        "-4 + 10",
        "call add",
        'call lookup with {"q": "x"}',
        "call the search tool",
        "call missing",
        "\n",
        "  ",
        "Ünïcode ✓",
    ]
)
TEXTS = st.lists(FRAGMENTS, max_size=6).map(" ".join)


@st.composite
def sim_requests(draw: st.DrawFn) -> SimRequest:
    vendor = draw(st.sampled_from(VENDORS))
    turns = draw(st.lists(st.builds(SimTurn, role=st.sampled_from(ROLES), text=TEXTS), max_size=4))
    tools = draw(st.lists(st.sampled_from(TOOL_NAMES), unique=True, max_size=3))
    stream = draw(st.booleans())
    return SimRequest(
        vendor=vendor,
        model=draw(st.sampled_from([MODEL, "qwen3:0.6b", "módel ✓"])),
        turns=tuple(turns),
        tools=tuple(tools),
        stream=stream,
        think=draw(st.booleans()),
        include_usage=vendor != "openai" or (stream and draw(st.booleans())),
        tool_choice=draw(st.none() | st.sampled_from(["none", "required", *TOOL_NAMES])),
        max_tokens=draw(st.none() | st.integers(min_value=1, max_value=6)),
    )


@settings(max_examples=120, deadline=None)
@given(request=sim_requests())
def test_the_policy_keeps_its_guarantees(request: SimRequest) -> None:
    sim = answer(request)
    assert answer(request) == sim  # deterministic
    assert sim.text == "".join(sim.pieces)
    words(sim.pieces)  # one word per delta, none empty
    # finish: tool_calls exactly with calls; length exactly when the cap cut the answer
    uncapped = answer(attrs.evolve(request, max_tokens=None))
    if sim.calls:
        assert sim.finish is FinishReason.TOOL_CALLS
        assert sim.pieces == ()
        assert uncapped.calls == sim.calls
    elif request.max_tokens is not None and len(uncapped.pieces) > request.max_tokens:
        assert sim.finish is FinishReason.LENGTH
        assert sim.pieces == uncapped.pieces[: request.max_tokens]
    else:
        assert sim.finish is FinishReason.STOP
        assert sim.pieces == uncapped.pieces
    # only advertised, allowed tools are called, and only in answer to a user
    names = {call.name for call in sim.calls}
    assert names <= set(request.tools)
    if request.tool_choice == "none":
        assert not sim.calls
    elif request.tool_choice not in (None, "required"):
        assert names <= {request.tool_choice}
    last = [turn for turn in request.turns if turn.role != "system"]
    if sim.calls:
        assert last[-1].role == "user"
    # thinking exactly when asked
    assert bool(sim.thinking) is request.think
    # usage
    usage = sim.usage
    assert usage.total == usage.prompt + usage.completion
    assert usage.completion >= len(sim.pieces)
    assert usage.completion == (
        len(sim.pieces)
        + estimate_tokens(sim.thinking)
        + sum(estimate_tokens(dumps(call.arguments)) for call in sim.calls)
    )
    assert usage.prompt >= sum(estimate_tokens(turn.text) for turn in request.turns)


@settings(max_examples=80, deadline=None)
@given(request=sim_requests(), style=st.sampled_from(STYLES), seq=st.integers(0, 10**6))
def test_any_answer_reads_back_through_the_client(
    request: SimRequest, style: ThinkStyle, seq: int
) -> None:
    sim = answer(request)
    result, _ = drive(request.vendor, stream_frames(request, sim, seq=seq, think_style=style))
    assert_same(result, sim, usage=request.include_usage)
    body = response_body(request, sim, seq=seq, think_style=style)
    assert_same(read_body(request.vendor, body), sim)


ECHO_TEXT = st.text(
    st.characters(
        categories=("L", "M", "N", "P", "S", "Zs", "Cc"),
        exclude_characters="<0123456789",
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(vendor=st.sampled_from(VENDORS), text=ECHO_TEXT)
def test_any_text_without_numbers_is_echoed(vendor: Vendor, text: str) -> None:
    # No tools, no digits (so no count or sum), no "<" (so no think tags): the echo rule applies.
    request = parse_request(vendor, encode(vendor, user(text)))
    sim = answer(request)
    if text.strip():
        assert sim.text == f"You said: {text.strip()}"
        assert words(sim.pieces) == ["You", "said:", *text.split()]
    elif vendor == "anthropic" and not text:
        # Anthropic's encoder skips an empty user turn: nothing has been asked yet.
        assert request.turns == ()
        assert sim.text
    else:
        assert sim.text.startswith("You said")
    assert sim.finish is FinishReason.STOP
    assert_same(streamed(request), sim)


# ---------------------------------------------------------------------------------------------
# Error bodies

#: Anthropic's documented error types for the statuses the simulator answers with.
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    500: "api_error",
}


@pytest.mark.parametrize(("status", "kind"), sorted(ANTHROPIC_TYPES.items()))
def test_error_bodies_have_each_vendors_shape(status: int, kind: str) -> None:
    message = "something went wrong"
    assert error_body("anthropic", status, message) == {
        "type": "error",
        "error": {"type": kind, "message": message},
    }
    assert error_body("ollama", status, message) == {"error": message}
    openai_error = error_body("openai", status, message)["error"]
    assert openai_error["message"] == message
    assert openai_error["type"] == kind
    assert anthropic.error_details(dumps(error_body("anthropic", status, message))) == (
        kind,
        kind,
        message,
    )
    assert openai_chat.error_details(dumps(error_body("openai", status, message)))[:2] == (
        kind,
        None,
    )
    assert ollama.error_details(dumps(error_body("ollama", status, message)))[:2] == (None, None)


@settings(max_examples=60, deadline=None)
@given(
    vendor=st.sampled_from(VENDORS),
    status=st.sampled_from([400, 401, 404, 405, 413, 500, 503]),
    message=st.text(
        st.characters(categories=("L", "N", "P", "S")), min_size=1, max_size=40
    ).flatmap(lambda first: st.just(first) | st.just(f"{first} and {first[::-1]}")),
)
def test_error_details_reads_the_message_back(vendor: Vendor, status: int, message: str) -> None:
    text = dumps(error_body(vendor, status, message))
    if vendor == "openai":
        details = openai_chat.error_details(text)
    elif vendor == "anthropic":
        details = anthropic.error_details(text)
    else:
        details = ollama.error_details(text)
    assert details[2] == message


def test_a_parse_error_message_survives_the_error_body() -> None:
    with pytest.raises(ValidationError) as caught:
        parse_request("anthropic", raw(model=""))
    text = dumps(error_body("anthropic", 400, caught.value.message))
    assert anthropic.error_details(text) == (
        "invalid_request_error",
        "invalid_request_error",
        caught.value.message,
    )
