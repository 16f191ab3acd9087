"""What a model is told besides the conversation: the system prompt, instructions, scopes and the
workspace -- and :func:`build`, which turns all of it into the exact messages of the next call.

Everything here is an immutable value and :func:`build` is a pure function: it reads its inputs
fresh on every call and mutates nothing, so a changed system prompt or instruction reaches the
very next request, and nothing said once is repeated into the history.

The rules:

* Instructions have a name, content and priority; adding one with a name already present
  replaces it; they are rendered by descending priority, ties in insertion order.
* Each instructions section renders as ``[open, *items, close]`` with empty parts dropped,
  joined by blank lines. The *format cascade* picks each part: for ``open`` the context's own
  format, then the provider's default format, then ``"## Instructions"``; for an item the
  instruction's ``override``, then the context's ``render``, then the provider's, then its
  content; for ``close`` the context's, then the provider's (there is no built-in close).
* A :class:`Scope` limits instructions, tools and files by name (``None``: all; ``()``: none; a
  tuple: only those). :meth:`Scope.narrow` intersects two scopes. A scope never filters
  messages.
* :func:`build` returns one system message (the system prompt, the instructions section, and a
  ``## Workspace`` section with each text file fenced and labelled with its path and language)
  when any of those exists, then the conversation's view as a provider should see it, with the
  workspace's images attached to a copy of the last user message. Tools are never rendered
  into the prompt (they travel as tool definitions).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Final

import attrs

from .errors import ValidationError
from .history import render_for_provider
from .messages import Message, Role
from .workspace import File, render_fenced

__all__ = [
    "DEFAULT_INSTRUCTIONS_OPEN",
    "WORKSPACE_HEADING",
    "ContextFormat",
    "Instruction",
    "Instructions",
    "Scope",
    "SectionFormat",
    "build",
    "render_instructions",
]

#: The heading of the instructions section when no format gives one.
DEFAULT_INSTRUCTIONS_OPEN: Final = "## Instructions"

#: The heading of the workspace section.
WORKSPACE_HEADING: Final = "## Workspace"


def _name(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{attribute.name} must be a non-blank string")


def _str(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str):
        raise ValidationError(f"{attribute.name} must be a string")


def _optional_str(instance: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise ValidationError(f"{attribute.name} must be a string or None")


def _priority(instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"priority must be an integer, not {value!r}")


@attrs.frozen
class Instruction:
    """One standing instruction. ``override``, when given, is rendered instead of any format's
    rendering of it."""

    name: str = attrs.field(validator=_name)
    content: str = attrs.field(validator=_str)
    priority: int = attrs.field(default=0, validator=_priority)
    override: str | None = attrs.field(default=None, validator=_optional_str)


@attrs.frozen
class SectionFormat:
    """How one section renders: an ``open`` line, each item (``render``), a ``close`` line.
    ``None`` leaves the part to the next format of the cascade."""

    open: str | None = attrs.field(default=None, validator=_optional_str)
    render: Callable[[Instruction], str] | None = None
    close: str | None = attrs.field(default=None, validator=_optional_str)


@attrs.frozen
class ContextFormat:
    """Formats per section (only instructions have one so far): a provider's default format,
    or the context's own."""

    instructions: SectionFormat | None = None


def _instructions(value: Iterable[Instruction]) -> tuple[Instruction, ...]:
    items = tuple(value)
    for index, item in enumerate(items):
        if not isinstance(item, Instruction):
            raise ValidationError(
                f"instructions[{index}] must be an Instruction, not {type(item).__name__}"
            )
    names = [item.name for item in items]
    if len(set(names)) != len(names):
        raise ValidationError("two instructions share a name: add() replaces by name")
    return items


@attrs.frozen
class Instructions:
    """A set of instructions by name, in insertion order; :meth:`ordered` is the render order."""

    items: tuple[Instruction, ...] = attrs.field(default=(), converter=_instructions)

    def add(self, *instructions: Instruction) -> Instructions:
        """A set with ``instructions`` added; one whose name is present replaces it in place."""
        items = list(self.items)
        for instruction in instructions:
            for index, existing in enumerate(items):
                if existing.name == instruction.name:
                    items[index] = instruction
                    break
            else:
                items.append(instruction)
        return Instructions(items)

    def remove(self, *names: str) -> Instructions:
        """A set without the named instructions (unknown names are ignored)."""
        unwanted = set(names)
        return Instructions(item for item in self.items if item.name not in unwanted)

    def get(self, name: str) -> Instruction | None:
        """The instruction called ``name``, if any."""
        return next((item for item in self.items if item.name == name), None)

    def ordered(self) -> tuple[Instruction, ...]:
        """By descending priority; ties keep insertion order."""
        return tuple(sorted(self.items, key=lambda item: -item.priority))

    def __len__(self) -> int:
        return len(self.items)


def _names(value: Iterable[str] | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise ValidationError("a scope takes a list of names, not a single string")
    items = tuple(value)
    for item in items:
        if not isinstance(item, str):
            raise ValidationError(f"scope names must be strings, not {type(item).__name__}")
    return items


def _intersect(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if a is None:
        return b
    if b is None:
        return a
    keep = set(b)
    return tuple(name for name in a if name in keep)


@attrs.frozen
class Scope:
    """Which instructions, tools and files are in play, by name (files by path).

    For each category ``None`` allows everything, ``()`` nothing, a tuple only those names.
    """

    name: str = attrs.field(default="scope", validator=_name)
    instructions: tuple[str, ...] | None = attrs.field(default=None, converter=_names)
    tools: tuple[str, ...] | None = attrs.field(default=None, converter=_names)
    files: tuple[str, ...] | None = attrs.field(default=None, converter=_names)

    def narrow(
        self,
        *,
        instructions: Iterable[str] | None = None,
        tools: Iterable[str] | None = None,
        files: Iterable[str] | None = None,
    ) -> Scope:
        """A scope allowing only what both this scope and the arguments allow (an argument
        left ``None`` narrows nothing). The name is kept; this scope is unchanged."""
        return Scope(
            name=self.name,
            instructions=_intersect(self.instructions, _names(instructions)),
            tools=_intersect(self.tools, _names(tools)),
            files=_intersect(self.files, _names(files)),
        )

    def allows_instruction(self, name: str) -> bool:
        """Whether the instruction ``name`` is in scope."""
        return self.instructions is None or name in self.instructions

    def allows_tool(self, name: str) -> bool:
        """Whether the tool ``name`` is in scope (out of scope: neither advertised nor run)."""
        return self.tools is None or name in self.tools

    def allows_file(self, path: str) -> bool:
        """Whether the workspace file at ``path`` is in scope."""
        return self.files is None or path in self.files


#: A scope that allows everything.
_EVERYTHING = Scope()


def render_instructions(
    instructions: Instructions,
    *,
    format: ContextFormat | None = None,
    provider_format: ContextFormat | None = None,
    scope: Scope | None = None,
) -> str | None:
    """The instructions section (see the module docstring for the cascade), or ``None`` when no
    instruction is in scope."""
    active = scope or _EVERYTHING
    items = [i for i in instructions.ordered() if active.allows_instruction(i.name)]
    if not items:
        return None
    own = format.instructions if format is not None else None
    default = provider_format.instructions if provider_format is not None else None

    def pick_open() -> str:
        for candidate in (own, default):
            if candidate is not None and candidate.open is not None:
                return candidate.open
        return DEFAULT_INSTRUCTIONS_OPEN

    def render(instruction: Instruction) -> str:
        if instruction.override is not None:
            return instruction.override
        for candidate in (own, default):
            if candidate is not None and candidate.render is not None:
                return candidate.render(instruction)
        return instruction.content

    close = next((c.close for c in (own, default) if c is not None and c.close is not None), None)
    parts = [pick_open(), *(render(item) for item in items), close or ""]
    return "\n\n".join(part for part in parts if part)


def build(
    view: Sequence[Message],
    *,
    system: str | None = None,
    instructions: Instructions | None = None,
    files: Sequence[File] = (),
    scope: Scope | None = None,
    format: ContextFormat | None = None,
    provider_format: ContextFormat | None = None,
) -> tuple[Message, ...]:
    """The exact messages for the next provider call.

    ``view`` is the conversation's view (recaps, then live messages); ``files`` the active
    workspace's files in order. Guarantees:

    * One system message first when there is a system prompt (even an empty one given
      explicitly), an instruction in scope, or a text file in scope. Its content is those
      parts joined by blank lines: the prompt, the instructions section, then
      :data:`WORKSPACE_HEADING` followed by each text file fenced with its path and language.
    * Then ``view`` as a provider should see it (interrupted answers annotated), unfiltered.
    * Images among the files in scope are attached to a copy of the last user message, after
      its own images, in file order; with no user message they are left out.
    * With nothing configured the result is ``(*view,)`` exactly; nothing is mutated.
    """
    if system is None and not files and (instructions is None or not len(instructions)):
        return render_for_provider(view)  # nothing configured: the view as a provider sees it
    active = scope or _EVERYTHING
    in_scope = [file for file in files if active.allows_file(file.path)]
    parts: list[str] = []
    if system is not None:
        parts.append(system)
    section = (
        render_instructions(
            instructions, format=format, provider_format=provider_format, scope=active
        )
        if instructions is not None
        else None
    )
    if section is not None:
        parts.append(section)
    texts = [render_fenced(file) for file in in_scope if not file.is_binary]
    if texts:
        parts.append("\n\n".join([WORKSPACE_HEADING, *texts]))
    messages = list(render_for_provider(view))
    images = [file.data for file in in_scope if file.is_image and file.data is not None]
    if images:
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if message.role is Role.USER:
                messages[index] = attrs.evolve(message, images=(*message.images, *images))
                break
    if parts:
        messages.insert(0, Message.system("\n\n".join(parts)))
    return tuple(messages)
