"""MCP shapes read into our data model and written back: no SDK, no event loop."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.mcp import (
    MAX_PROBLEM_CHARS,
    MAX_RESULT_IMAGE_CHARS,
    MAX_RESULT_IMAGES,
    MAX_TOOLS,
    content_text,
    describe_problems,
    local_name,
    read_listing,
    read_result,
    write_result,
)
from protocols.messages import ToolFailure, ToolSuccess

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()
JPEG = base64.b64encode(b"\xff\xd8\xff\xe0" + b"\x00" * 16).decode()


def image(data: str, media: str = "image/png") -> dict[str, Any]:
    return {"type": "image", "data": data, "mimeType": media}


#: Schema checks take their time on a loaded machine: no per-example deadline.
SETTINGS = settings(max_examples=100, deadline=None)


def test_local_names() -> None:
    assert local_name("add") == "add"
    assert local_name("files.read/all") == "files_read_all"
    assert local_name("read", "fs_") == "fs_read"
    assert local_name("") is None
    assert local_name("x" * 65) is None
    assert local_name("x" * 61, "fs_") == "fs_" + "x" * 61


def test_a_listing_keeps_good_tools_and_says_why_it_left_others_out() -> None:
    listing = read_listing(
        [
            {"name": "add", "description": "Add.", "inputSchema": {"type": "object"}, "x": 1},
            {"name": "a.b", "inputSchema": {"type": "object", "properties": {}}},
            {"name": "a_b", "inputSchema": {"type": "object"}},  # clashes once sanitized
            {"name": "mine", "inputSchema": {"type": "object"}},  # taken by another tool
            {"name": "broken", "inputSchema": {"type": "array"}},
            {"name": 7},
            {"name": "bare"},  # no schema: takes no arguments
        ],
        taken=["mine"],
    )
    assert list(listing.tools) == ["add", "a_b", "bare"]
    assert listing.remote == {"add": "add", "a_b": "a.b", "bare": "bare"}
    assert listing.tools["add"].description == "Add."
    assert listing.tools["bare"].parameters == {"type": "object"}
    reasons = "\n".join(listing.skipped)
    assert len(listing.skipped) == 4
    assert "'a_b': its name 'a_b' is taken by 'a.b'" in reasons
    assert "'mine'" in reasons
    assert "'broken'" in reasons
    assert "7" in reasons


def test_a_listing_keeps_at_most_max_tools() -> None:
    listing = read_listing({"name": f"t{n}"} for n in range(MAX_TOOLS + 2))
    assert len(listing.tools) == MAX_TOOLS
    assert len(listing.skipped) == 2
    assert "more than 1000 tools" in listing.skipped[0]


@SETTINGS
@given(st.lists(st.dictionaries(st.sampled_from(["name", "description", "inputSchema"]), JSON)))
def test_a_listing_never_raises(tools: list[dict[str, Any]]) -> None:
    listing = read_listing(tools)
    assert len(listing.tools) + len(listing.skipped) == len(tools)
    for line in listing.skipped:  # each reason a short line, whatever the server sent
        assert len(line) <= MAX_PROBLEM_CHARS
        assert line == " ".join(line.split())


def test_a_tool_left_out_is_named_briefly() -> None:
    huge = "x" * 10_000
    listing = read_listing(
        [
            {"name": huge},
            {"name": "ok", "inputSchema": {"type": "object", "properties": {"a": {"type": huge}}}},
        ]
    )
    assert listing.tools == {}
    assert all(len(line) <= MAX_PROBLEM_CHARS for line in listing.skipped)
    assert listing.skipped[0].startswith("'xxxx")
    assert listing.skipped[1].startswith("'ok': its input schema is not usable")


def test_results_map_onto_tool_results() -> None:
    text = read_result("c1", "t", {"content": [{"type": "text", "text": "hello"}]})
    assert text == ToolSuccess(id="c1", name="t", value="hello")

    # By the protocol the text and the structured content say the same: the text is kept.
    both = read_result(
        "c1", "t", {"content": [{"type": "text", "text": "n is 1"}], "structuredContent": {"n": 1}}
    )
    assert both.value == "n is 1"
    structured = read_result("c1", "t", {"content": [], "structuredContent": {"n": 1}})
    assert structured.value == {"n": 1}

    mixed = read_result(
        "c1",
        "t",
        {
            "content": [
                {"type": "text", "text": "a dot"},
                image(PNG),
                {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
                {"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}},
                {"type": "resource", "resource": {"uri": "file:///b", "blob": "AAAA"}},
                {"type": "resource_link", "uri": "file:///c", "name": "c"},
                image(JPEG, "image/png"),  # the bytes say what it is
            ],
            "structuredContent": {"dots": 1},
        },
    )
    assert isinstance(mixed, ToolSuccess)
    assert mixed.value == (
        "a dot\n\n[audio: audio/wav, 3 bytes, not shown]\n\ninside\n\n"
        "[resource file:///b: unknown type, 3 bytes, not shown]\n\n[resource: file:///c]"
    )
    assert mixed.images == (f"data:image/png;base64,{PNG}", f"data:image/jpeg;base64,{JPEG}")

    failed = read_result("c1", "t", {"content": [{"type": "text", "text": "no"}], "isError": True})
    assert failed == ToolFailure(id="c1", name="t", error="no")
    silent = read_result("c1", "t", {"content": [], "isError": True})
    assert isinstance(silent, ToolFailure)
    assert silent.error == "t failed (no message)"


def test_an_answer_of_images_alone_gives_its_structured_content_with_the_images() -> None:
    both = read_result("c", "t", {"content": [image(PNG)], "structuredContent": {"n": 1}})
    assert both == ToolSuccess("c", "t", {"n": 1}, images=[f"data:image/png;base64,{PNG}"])
    alone = read_result("c", "t", {"content": [image(PNG)]})
    assert alone == ToolSuccess("c", "t", "", images=[f"data:image/png;base64,{PNG}"])


@pytest.mark.parametrize(
    ("part", "note"),
    [
        (image("PD94bWwg", "image/svg+xml"), "[image: image/svg+xml, 6 bytes, not shown]"),
        (image("AAAA", "image/png"), "[image: image/png, 3 bytes, not shown]"),  # not a PNG
        (image(PNG[:-1] + "!"), "[image: image/png, 24 bytes, not shown]"),  # not base64
        (image(PNG[:-2]), "[image: image/png, 22 bytes, not shown]"),  # not whole base64
        (image(""), "[image: image/png, 0 bytes, not shown]"),
        ({"type": "image", "data": 7, "mimeType": "image/png"}, "unknown size, not shown]"),
    ],
)
def test_an_image_a_model_cannot_be_shown_is_noted(part: dict[str, Any], note: str) -> None:
    result = read_result("c", "t", {"content": [part]})
    assert isinstance(result, ToolSuccess)
    assert result.images == ()
    assert note in result.value


def test_at_most_max_result_images_are_kept_and_the_rest_noted() -> None:
    pictures = [image(PNG) for _ in range(MAX_RESULT_IMAGES + 2)]
    result = read_result("c", "t", {"content": pictures})
    assert isinstance(result, ToolSuccess)
    assert len(result.images) == MAX_RESULT_IMAGES == 8
    assert result.value == "\n\n".join(["[image: image/png, 24 bytes, not shown]"] * 2)


def test_images_past_max_result_image_chars_are_noted() -> None:
    padding = "A" * (MAX_RESULT_IMAGE_CHARS // 2 - len(PNG))
    half = PNG + padding  # exactly half the budget of base64
    assert len(half) * 2 == MAX_RESULT_IMAGE_CHARS == 5 * 1024 * 1024
    result = read_result("c", "t", {"content": [image(half), image(half), image(PNG)]})
    assert isinstance(result, ToolSuccess)
    assert [len(kept) for kept in result.images] == [len("data:image/png;base64,") + len(half)] * 2
    assert result.value == "[image: image/png, 24 bytes, not shown]"
    # A small image after one too large for what is left still fits.
    big = PNG + "A" * (MAX_RESULT_IMAGE_CHARS - len(PNG) - 4)
    later = read_result("c", "t", {"content": [image(PNG), image(big), image(PNG)]})
    assert isinstance(later, ToolSuccess)
    assert len(later.images) == 2
    assert later.value.startswith("[image: image/png, ")


def test_an_error_answers_images_are_only_noted() -> None:
    failed = read_result("c", "t", {"content": [image(PNG)], "isError": True})
    assert failed == ToolFailure("c", "t", "[image: image/png, 24 bytes, not shown]")


def test_long_results_are_cut_and_say_so() -> None:
    result = read_result("c", "t", {"content": [{"type": "text", "text": "x" * 50}]}, limit=10)
    assert result.value == "x" * 10 + "\n[... cut: the result had 50 characters]"


@SETTINGS
@given(JSON)
def test_any_answer_reads_into_a_result(answer: Any) -> None:
    result = read_result("c", "t", answer if isinstance(answer, dict) else {"content": answer})
    assert result.id == "c"
    assert isinstance(result.render(), str)


def test_our_results_written_as_mcp_answers() -> None:
    assert write_result(ToolSuccess(id="c", name="t", value="hi")) == {
        "content": [{"type": "text", "text": "hi"}],
        "isError": False,
    }
    assert write_result(ToolSuccess(id="c", name="t", value={"n": 1})) == {
        "content": [{"type": "text", "text": '{"n":1}'}],
        "isError": False,
        "structuredContent": {"n": 1},
    }
    pictured = ToolSuccess("c", "t", "a dot", images=[PNG, f"data:image/jpeg;base64,{JPEG}"])
    assert write_result(pictured) == {
        "content": [
            {"type": "text", "text": "a dot"},
            {"type": "image", "data": PNG, "mimeType": "image/png"},
            {"type": "image", "data": JPEG, "mimeType": "image/jpeg"},
        ],
        "isError": False,
    }
    # What we write, an MCP client of ours reads back the same.
    assert read_result("c", "t", write_result(pictured)) == ToolSuccess(
        "c", "t", "a dot", images=[f"data:image/png;base64,{PNG}", f"data:image/jpeg;base64,{JPEG}"]
    )
    assert write_result(ToolFailure(id="c", name="t", error="bad")) == {
        "content": [{"type": "text", "text": "bad"}],
        "isError": True,
    }


def test_content_text_skips_what_is_not_a_part() -> None:
    assert content_text([{"type": "text", "text": "a"}, "junk", {"type": "video"}]) == (  # type: ignore[list-item]
        "a\n\n[video content, not shown]"
    )


def test_problems_are_described_in_a_line() -> None:
    problems = [
        {"loc": ("tools", 3, "inputSchema", "type"), "msg": "Input should be 'object'"},
        {"loc": ("tools", 4, "name"), "msg": "Input should be a valid string"},
    ]
    assert describe_problems(problems) == (
        "tools.3.inputSchema.type: Input should be 'object' (and 1 more)"
    )
    assert describe_problems(problems[:1], skip=2) == "inputSchema.type: Input should be 'object'"
    assert describe_problems([]) == "not valid"
    assert describe_problems([{"loc": (), "msg": ""}]) == "not valid"


PROBLEM = st.fixed_dictionaries(
    {},
    optional={
        "loc": st.lists(st.text() | st.integers(), max_size=6).map(tuple) | JSON,
        "msg": st.text() | JSON,
        "input": JSON,
    },
)


@SETTINGS
@given(st.lists(PROBLEM | JSON, max_size=4), st.integers(min_value=0, max_value=4))
def test_any_problems_are_described_in_one_short_line(problems: list[Any], skip: int) -> None:
    text = describe_problems(problems, skip=skip)
    assert text
    assert len(text) <= MAX_PROBLEM_CHARS
    assert text == " ".join(text.split())  # one line
