"""protocols.workspace, rendering: files fenced for a model to read."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.workspace import (
    File,
    WorkspaceError,
    render_fenced,
)

SETTINGS = settings(max_examples=80, deadline=None)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n-fake-image").decode()


def code_of(excinfo: pytest.ExceptionInfo[WorkspaceError]) -> str:
    return excinfo.value.code


def png(path: str = "img.png") -> File:
    return File.binary(path, PNG, "image/png")


# --------------------------------------------------------------------------- rendering


def test_render_fenced_format() -> None:
    file = File.text("src/main.ts", "export const x = 1")
    assert render_fenced(file) == "File: src/main.ts\n```typescript\nexport const x = 1\n```"


def test_render_fenced_uses_a_fence_longer_than_any_backtick_run() -> None:
    text = "before\n```\nnot the end\n`````\nafter"
    rendered = render_fenced(File.text("a.md", text))
    assert rendered == f"File: a.md\n``````markdown\n{text}\n``````"


def test_render_fenced_does_not_add_a_blank_line_after_a_final_newline() -> None:
    assert render_fenced(File.text("a.py", "x = 1\n")) == "File: a.py\n```python\nx = 1\n```"


def test_render_fenced_refuses_binaries() -> None:
    with pytest.raises(WorkspaceError) as excinfo:
        render_fenced(png())
    assert code_of(excinfo) == "modality"


@SETTINGS
@given(text=st.text(alphabet="`a\n ~", max_size=40))
def test_rendered_content_cannot_close_its_fence(text: str) -> None:
    rendered = render_fenced(File.text("x.txt", text))
    header, opening, *body = rendered.split("\n")
    assert header == "File: x.txt"
    fence = opening.removesuffix("text")
    assert set(fence) == {"`"}
    assert len(fence) >= 3
    assert body[-1] == fence
    # The closing fence goes on its own line; a final newline of the text serves as its break.
    assert "\n".join(body[:-1]) == text.removesuffix("\n")
    # no line of the content could be read as a closing fence
    assert all(not line.lstrip(" ").startswith(fence) for line in body[:-1])
