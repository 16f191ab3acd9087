"""Instructions, the format cascade, scopes and the pure prompt build."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.context import (
    DEFAULT_INSTRUCTIONS_OPEN,
    WORKSPACE_HEADING,
    ContextFormat,
    Instruction,
    Instructions,
    Scope,
    SectionFormat,
    build,
    render_instructions,
)
from protocols.errors import ValidationError
from protocols.history import INTERRUPTED_NOTE
from protocols.messages import Message, Role
from protocols.workspace import File, render_fenced

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16).decode()


def test_same_name_replaces_in_place_and_order_is_by_priority_then_insertion() -> None:
    rules = Instructions().add(
        Instruction("a", "first", priority=0),
        Instruction("b", "second", priority=5),
        Instruction("c", "third", priority=0),
    )
    rules = rules.add(Instruction("a", "first again", priority=0))
    assert [i.content for i in rules.items] == ["first again", "second", "third"]
    assert [i.name for i in rules.ordered()] == ["b", "a", "c"]
    assert rules.get("a") == Instruction("a", "first again")
    assert rules.get("zzz") is None
    assert len(rules.remove("b", "unknown")) == 2


def test_instructions_refuse_bad_values() -> None:
    with pytest.raises(ValidationError, match="share a name"):
        Instructions([Instruction("a", "x"), Instruction("a", "y")])
    with pytest.raises(ValidationError, match="non-blank"):
        Instruction(" ", "x")
    with pytest.raises(ValidationError, match="priority"):
        Instruction("a", "x", priority=True)


def test_the_built_in_section() -> None:
    rules = Instructions([Instruction("terse", "Be terse."), Instruction("cite", "Cite.", 1)])
    assert render_instructions(rules) == f"{DEFAULT_INSTRUCTIONS_OPEN}\n\nCite.\n\nBe terse."
    assert render_instructions(Instructions()) is None


def test_the_format_cascade() -> None:
    rules = Instructions(
        [
            Instruction("terse", "Be terse."),
            Instruction("escalate", "Escalate.", priority=1, override='<rule p="high">Esc.</rule>'),
        ]
    )
    provider = ContextFormat(
        SectionFormat(
            open="<rules>", render=lambda i: f"<rule>{i.content}</rule>", close="</rules>"
        )
    )
    assert render_instructions(rules, provider_format=provider) == (
        '<rules>\n\n<rule p="high">Esc.</rule>\n\n<rule>Be terse.</rule>\n\n</rules>'
    )
    # The context's own format wins part by part; what it leaves None falls to the provider's.
    own = ContextFormat(SectionFormat(render=lambda i: f"- {i.content}"))
    assert render_instructions(rules, format=own, provider_format=provider) == (
        '<rules>\n\n<rule p="high">Esc.</rule>\n\n- Be terse.\n\n</rules>'
    )
    headed = ContextFormat(SectionFormat(open="# Rules", close=""))
    assert render_instructions(rules, format=headed, provider_format=provider) == (
        '# Rules\n\n<rule p="high">Esc.</rule>\n\n<rule>Be terse.</rule>'
    )


def test_scopes_and_narrowing() -> None:
    everything = Scope("all")
    assert everything.allows_tool("x")
    assert everything.allows_file("a.py")
    nothing = Scope("none", instructions=[], tools=[], files=[])
    assert not nothing.allows_instruction("x")
    assert not nothing.allows_tool("x")
    some = Scope("some", tools=["read", "write"])
    narrowed = some.narrow(tools=["write", "delete"], files=["a.py"])
    assert narrowed.tools == ("write",)
    assert narrowed.files == ("a.py",)
    assert narrowed.instructions is None
    assert narrowed.name == "some"
    assert some.tools == ("read", "write")  # the parent is untouched
    assert some.narrow() == some
    with pytest.raises(ValidationError, match="list of names"):
        Scope("bad", tools="read")  # type: ignore[arg-type]


_NAMES = st.none() | st.lists(st.sampled_from("abcde"), unique=True).map(tuple)


@given(_NAMES, _NAMES)
def test_narrow_is_an_intersection(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> None:
    scope = Scope(tools=a).narrow(tools=b)
    for name in "abcdef":
        assert scope.allows_tool(name) == (
            Scope(tools=a).allows_tool(name) and Scope(tools=b).allows_tool(name)
        )


def test_nothing_configured_gives_the_view_exactly() -> None:
    view = (Message.user("hi"), Message.assistant("hello"))
    assert build(view) == view
    assert build(()) == ()


def test_an_explicit_empty_system_prompt_still_makes_a_system_message() -> None:
    built = build((Message.user("hi"),), system="")
    assert built[0].role is Role.SYSTEM
    assert built[0].content == ""
    assert built[1:] == (Message.user("hi", id=built[1].id, created_at=built[1].created_at),)


def test_the_full_system_message() -> None:
    code = File.text("src/main.py", "x = 1\n")
    notes = File.text("notes.md", "todo")
    image = File.binary("shot.png", PNG, "image/png")
    rules = Instructions([Instruction("terse", "Be terse.")])
    question = Message.user("Review it.")
    built = build(
        (question,),
        system="You are a code reviewer.",
        instructions=rules,
        files=[code, image, notes],
        scope=Scope(files=["src/main.py", "shot.png"]),
    )
    system, user = built
    assert system.content == (
        "You are a code reviewer.\n\n## Instructions\n\nBe terse.\n\n"
        f"{WORKSPACE_HEADING}\n\n{render_fenced(code)}"
    )
    assert "notes.md" not in system.content  # out of scope
    assert user.images == (PNG,)
    assert question.images == ()  # a copy got the image, the original is untouched


def test_images_go_to_the_last_user_message_after_its_own() -> None:
    own = base64.b64encode(b"\xff\xd8\xff" + b"\x00" * 8).decode()
    first, second = File.binary("a.png", PNG, "image/png"), File.binary("b.png", PNG, "image/png")
    view = (Message.user("one"), Message.assistant("ok"), Message.user("two", images=[own]))
    built = build(view, files=[first, second])
    assert built[0] == view[0]
    assert built[2].images == (own, PNG, PNG)
    # With no user message the images are left out and nothing else changes.
    lone = (Message.assistant("alone"),)
    assert build(lone, files=[first]) == lone


def test_interrupted_answers_are_annotated_and_messages_never_filtered() -> None:
    cut = Message.assistant("Once upon a", interrupted=True)
    built = build((Message.user("story"), cut), scope=Scope(instructions=[], tools=[], files=[]))
    assert built[1].content == f"Once upon a\n\n{INTERRUPTED_NOTE}"
    assert cut.content == "Once upon a"


def test_a_live_system_update_reaches_the_next_build() -> None:
    view = (Message.user("hi"),)
    assert build(view, system="v1")[0].content == "v1"
    assert build(view, system="v2")[0].content == "v2"
    # Each build mints its own system message; the view is never touched.
    assert build(view, system="v1")[0].id != build(view, system="v1")[0].id
    assert view == (Message.user("hi", id=view[0].id, created_at=view[0].created_at),)
