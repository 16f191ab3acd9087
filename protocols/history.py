"""A conversation's history as a pure value: a live tail, compacted sections and a rollup summary.

:class:`History` is immutable: every change returns a new value, so the actor that owns a
conversation commits a change by swapping one reference, and a failure half-way (a summarizer
that raises) leaves the old value untouched. Compaction is planned here
(:func:`plan_fold`, :func:`plan_collapse`) and applied here (:meth:`History.fold`,
:meth:`History.collapse`); only the summaries come from outside, from an async summarizer the
actor awaits.

Rules:

* ``view()`` shows each section as one assistant *recap* message, ``RECAP_PREFIX`` + its summary,
  then the live tail. The rollup (a summary of all section summaries) is never shown in the view;
  it serves :meth:`History.reference` and callers that want one paragraph.
* A fold never separates a tool call from its results and never folds past an assistant message
  whose calls are not all answered; the last ``keep`` messages always stay live.
* A sections cap merges the oldest overflow sections into one, so ``len(sections) <= cap``.
* :func:`render_for_provider` marks interrupted assistant answers so the model knows its previous
  answer was cut short.
* :meth:`History.snapshot` is plain data (:class:`ConversationSnapshot`, JSON through the codec);
  :meth:`History.restore` gives back an equal history, and re-snapshotting it an equal snapshot.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Final

import attrs

from ._json import dumps
from .accounting import estimate_tokens
from .errors import ValidationError
from .messages import Message, Role, ToolCall, new_id

__all__ = [
    "IMAGE_TOKEN_ESTIMATE",
    "INTERRUPTED_NOTE",
    "MESSAGE_TOKEN_OVERHEAD",
    "RECAP_PREFIX",
    "ConversationSnapshot",
    "History",
    "Section",
    "check_history",
    "estimate_messages",
    "plan_collapse",
    "plan_fold",
    "recap",
    "reference_text",
    "render_for_provider",
    "summary_inputs",
    "unanswered_calls",
]

#: The fixed label that starts every recap message in :meth:`History.view` (note the space).
RECAP_PREFIX: Final = "[Summary of earlier messages] "

#: Appended to an interrupted assistant answer when it is rendered for a provider.
INTERRUPTED_NOTE: Final = "[This answer was interrupted before it was finished.]"

#: Tokens a message costs beyond its text (role, framing), for :func:`estimate_messages`.
MESSAGE_TOKEN_OVERHEAD: Final = 4

#: Tokens one attached image is estimated at.
IMAGE_TOKEN_ESTIMATE: Final = 512


def _messages(value: Iterable[Message]) -> tuple[Message, ...]:
    items = tuple(value)
    for index, item in enumerate(items):
        if not isinstance(item, Message):
            raise ValidationError(f"messages[{index}] must be a Message, not {type(item).__name__}")
    return items


def _sections(value: Iterable[Section]) -> tuple[Section, ...]:
    items = tuple(value)
    for index, item in enumerate(items):
        if not isinstance(item, Section):
            raise ValidationError(f"sections[{index}] must be a Section, not {type(item).__name__}")
    return items


def _nonempty(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{attribute.name} must be a non-empty string")


def _text(instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if not isinstance(value, str):
        raise ValidationError(f"{attribute.name} must be a string")


def _optional_text(instance: object, attribute: attrs.Attribute[str | None], value: object) -> None:
    if value is not None and not isinstance(value, str):
        raise ValidationError(f"{attribute.name} must be a string or None")


@attrs.frozen
class Section:
    """A compacted part of a conversation: its summary and the original messages it replaced."""

    id: str = attrs.field(validator=_nonempty)
    summary: str = attrs.field(validator=_text)
    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    # The ids of the originals, computed once: a change to a long history checks new ids
    # against a few section sets instead of every message.
    _ids: frozenset[str] = attrs.field(init=False, eq=False, repr=False, hash=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_ids", frozenset(message.id for message in self.messages))


@attrs.frozen
class ConversationSnapshot:
    """A conversation as plain data, for stores and transport (JSON through the codec).

    ``summary`` is the rollup (``None`` before the first compaction); ``sections`` oldest first;
    ``messages`` the live tail. Summarizer settings are not part of it: they are supplied again
    when a conversation is restored.
    """

    id: str = attrs.field(validator=_nonempty)
    summary: str | None = attrs.field(default=None, validator=_optional_text)
    sections: tuple[Section, ...] = attrs.field(default=(), converter=_sections)
    messages: tuple[Message, ...] = attrs.field(default=(), converter=_messages)


def recap(section: Section) -> Message:
    """The assistant message that stands for ``section`` in a view: ``RECAP_PREFIX`` + summary.

    Its id is the section's id and its time the time of the section's last original, so views
    of equal histories are equal.
    """
    stamp = section.messages[-1].created_at if section.messages else 0.0
    return Message(
        role=Role.ASSISTANT,
        content=RECAP_PREFIX + section.summary,
        id=section.id,
        created_at=stamp,
    )


@attrs.frozen
class History:
    """One conversation's state (see the module docstring). Build it with ``History(id)`` or
    :meth:`restore`; change it with the methods, which return new values."""

    id: str = attrs.field(factory=new_id, validator=_nonempty)
    messages: tuple[Message, ...] = attrs.field(default=(), converter=_messages)
    sections: tuple[Section, ...] = attrs.field(default=(), converter=_sections)
    summary: str | None = attrs.field(default=None, validator=_optional_text)
    # The ids of the live tail, kept so that add() checks only the new messages (against these
    # and the sections' own sets) instead of walking the whole history again.
    _tail_ids: frozenset[str] = attrs.field(init=False, eq=False, repr=False, hash=False)

    def __attrs_post_init__(self) -> None:
        # Ids identify messages (and recaps, which take their section's id) in views and
        # searches: they must be unique across the whole conversation.
        seen: set[str] = set()
        for section in self.sections:
            if section.id in seen:
                raise ValidationError(f"the conversation holds two sections with id {section.id!r}")
            seen.add(section.id)
        for message in self._all_messages():
            if message.id in seen:
                raise ValidationError(f"the conversation holds two messages with id {message.id!r}")
            seen.add(message.id)
        object.__setattr__(self, "_tail_ids", frozenset(m.id for m in self.messages))

    def _holds(self, message_id: str) -> bool:
        if message_id in self._tail_ids:
            return True
        return any(message_id == s.id or message_id in s._ids for s in self.sections)

    def _all_messages(self) -> Iterable[Message]:
        for section in self.sections:
            yield from section.messages
        yield from self.messages

    # -- reading -------------------------------------------------------------------------------

    @property
    def count(self) -> int:
        """The number of live (not compacted) messages."""
        return len(self.messages)

    def message(self, message_id: str) -> Message | None:
        """The live message with ``message_id``, or ``None``."""
        return next((m for m in self.messages if m.id == message_id), None)

    def view(self) -> tuple[Message, ...]:
        """One recap message per section (oldest first), then the live tail."""
        return (*(recap(section) for section in self.sections), *self.messages)

    def search(self, query: str) -> tuple[Message, ...]:
        """Messages whose content contains ``query`` (case-insensitive): the sections' originals
        (oldest first), then the live tail. An empty query matches nothing."""
        if not query:
            return ()
        needle = query.casefold()
        return tuple(m for m in self._all_messages() if needle in m.content.casefold())

    def rehydrate(self, section_id: str) -> tuple[Message, ...]:
        """The original messages of section ``section_id`` (``()`` when there is none). Nothing
        is re-inserted into the conversation."""
        for section in self.sections:
            if section.id == section_id:
                return section.messages
        return ()

    def reference(
        self, *, label: str | None = None, messages: Sequence[Message] = (), summary: bool = True
    ) -> str:
        """A provenance-labelled text block about this conversation, to put into another one
        without merging turns (see :func:`reference_text`); ``label`` defaults to the id."""
        rollup = self.summary if summary else None
        return reference_text(label or self.id, summary=rollup, messages=messages)

    def snapshot(self) -> ConversationSnapshot:
        """This history as plain data."""
        return ConversationSnapshot(
            id=self.id, summary=self.summary, sections=self.sections, messages=self.messages
        )

    @classmethod
    def restore(cls, snapshot: ConversationSnapshot) -> History:
        """The history ``snapshot`` was taken of (raises ValidationError on duplicate ids)."""
        return cls(
            id=snapshot.id,
            messages=snapshot.messages,
            sections=snapshot.sections,
            summary=snapshot.summary,
        )

    # -- changing ------------------------------------------------------------------------------

    def add(self, messages: Iterable[Message]) -> History:
        """Append ``messages`` to the live tail. A message id already in the conversation raises
        :class:`ValidationError` (ids identify messages for removal and search).

        Only the new messages are checked, so appending costs little more than copying the tail
        (this is the hot path of a long-lived conversation)."""
        new = messages if type(messages) is tuple else tuple(messages)
        if not new:
            return self
        for message in new:
            if type(message) is not Message:
                new = _messages(new)  # (refuses what is no Message, naming where it is)
                break
        tail, sections = self._tail_ids, self.sections
        fresh: set[str] = set()
        for message in new:
            key = message.id
            if key in fresh or key in tail or (sections and self._holds(key)):
                raise ValidationError(f"the conversation holds two messages with id {key!r}")
            fresh.add(key)
        grown: History = object.__new__(History)
        _set = object.__setattr__
        _set(grown, "id", self.id)
        _set(grown, "messages", self.messages + new)
        _set(grown, "sections", sections)
        _set(grown, "summary", self.summary)
        _set(grown, "_tail_ids", tail | fresh)
        return grown

    def remove(self, message_ids: Iterable[str]) -> tuple[History, bool]:
        """Remove live messages by id; the flag is true only when every id was found."""
        if isinstance(message_ids, str):
            raise ValidationError("remove() takes an iterable of ids, not a single string")
        wanted = set(message_ids)
        kept = tuple(m for m in self.messages if m.id not in wanted)
        found = {m.id for m in self.messages} & wanted
        return attrs.evolve(self, messages=kept), found == wanted

    def clear(self) -> History:
        """Empty the live tail (sections and the rollup stay)."""
        return attrs.evolve(self, messages=())

    def fold(self, count: int, summary: str, *, section_id: str | None = None) -> History:
        """Move the oldest ``count`` live messages into a new section with ``summary`` (the
        caller plans ``count`` with :func:`plan_fold`)."""
        if (
            isinstance(count, bool)
            or not isinstance(count, int)
            or not 0 < count <= len(self.messages)
        ):
            raise ValidationError(f"cannot fold {count!r} of {len(self.messages)} live messages")
        section = Section(section_id or new_id(), summary, self.messages[:count])
        return attrs.evolve(
            self, messages=self.messages[count:], sections=(*self.sections, section)
        )

    def collapse(self, count: int, summary: str, *, section_id: str | None = None) -> History:
        """Merge the oldest ``count`` sections (at least 2) into one with ``summary``, keeping
        their originals in order (the caller plans ``count`` with :func:`plan_collapse`)."""
        if (
            isinstance(count, bool)
            or not isinstance(count, int)
            or not 2 <= count <= len(self.sections)
        ):
            raise ValidationError(f"cannot merge {count!r} of {len(self.sections)} sections")
        merged = Section(
            section_id or new_id(),
            summary,
            tuple(m for section in self.sections[:count] for m in section.messages),
        )
        return attrs.evolve(self, sections=(merged, *self.sections[count:]))

    def with_summary(self, summary: str | None) -> History:
        """The same history with the rollup replaced."""
        return attrs.evolve(self, summary=summary)


# ---------------------------------------------------------------------------------------------
# Planning


def plan_fold(messages: Sequence[Message], keep: int = 0) -> int:
    """How many of the oldest ``messages`` a compaction folds (0: nothing to fold).

    Guarantees: the last ``keep`` messages stay; the fold never ends between an assistant
    message with tool calls and the tool messages answering them (it ends before that
    assistant message instead); it never includes an assistant message with a call that no
    later message answers (a call still being executed), nor anything after it. A result
    answers the latest earlier call with its id that is still unanswered, so ids a provider
    reuses across turns are paired correctly.
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
        raise ValidationError(f"keep must be an integer >= 0, not {keep!r}")
    limit = max(len(messages) - keep, 0)
    open_calls: dict[str, list[int]] = {}
    pairs: list[tuple[int, int]] = []  # (index of the call, index of its result)
    for index, message in enumerate(messages):
        if message.role is Role.ASSISTANT:
            for call in message.calls:
                open_calls.setdefault(call.id, []).append(index)
        elif message.role is Role.TOOL and message.tool_call_id is not None:
            waiting = open_calls.get(message.tool_call_id)
            if waiting:
                pairs.append((waiting.pop(), index))
    for indices in open_calls.values():
        if indices:  # a call still being executed: fold nothing from it on
            limit = min(limit, *indices)
    end = limit
    changed = True
    while changed and end > 0:  # never end between a call and its result
        changed = False
        for made, answered in pairs:
            if made < end <= answered:
                end = made
                changed = True
    return end


def unanswered_calls(messages: Sequence[Message]) -> tuple[ToolCall, ...]:
    """The assistant tool calls in ``messages`` that no later tool message answers (a result
    answers the latest earlier open call with its id). Vendors refuse a request with one, so a
    provider checks this before sending."""
    open_calls: dict[str, list[ToolCall]] = {}
    for message in messages:
        if message.role is Role.ASSISTANT:
            for call in message.calls:
                open_calls.setdefault(call.id, []).append(call)
        elif message.role is Role.TOOL and message.tool_call_id is not None:
            waiting = open_calls.get(message.tool_call_id)
            if waiting:
                waiting.pop()
    return tuple(call for calls in open_calls.values() for call in calls)


#: How many call ids an error about calls without results names at most.
_SHOWN_CALLS = 5


def check_history(messages: Iterable[Message], *, what: str = "history") -> tuple[Message, ...]:
    """``messages`` as a tuple, when they are a history a run can go on from; else raises
    :class:`ValidationError` naming the first position (``what[i]``) that is wrong.

    A history is what a conversation of this library always holds: :class:`Message` values
    with distinct ids, in which every assistant tool call is answered by exactly one tool
    message before any other message follows it (a tool message answers an open call of the
    assistant message just before it: a provider's call ids are not assumed unique across
    turns), and no call is left without its result at the end. System messages may stand
    anywhere (every wire merges them into one system text)."""
    if isinstance(messages, str | Message):
        raise ValidationError(
            f"{what} must be a sequence of messages, not a {type(messages).__name__}"
        )
    try:
        items = tuple(messages)
    except TypeError:
        raise ValidationError(
            f"{what} must be a sequence of messages, not {type(messages).__name__}"
        ) from None
    ids: set[str] = set()
    pending: list[str] = []  # ids of the calls waiting for their result
    owner = 0  # the assistant message that made them
    for index, message in enumerate(items):
        where = f"{what}[{index}]"
        if not isinstance(message, Message):
            raise ValidationError(f"{where} must be a Message, not {type(message).__name__}")
        if message.id in ids:
            raise ValidationError(f"{where} has the id {message.id!r} of an earlier message")
        ids.add(message.id)
        if message.role is Role.TOOL:
            if message.tool_call_id not in pending:
                raise ValidationError(
                    f"{where} answers the call {message.tool_call_id!r}, which is no open call "
                    "of the assistant message before it"
                )
            pending.remove(message.tool_call_id)
            continue
        if pending:
            raise ValidationError(
                f"{what}[{owner}] made calls that have no result before {where}: " + _shown(pending)
            )
        if message.role is Role.ASSISTANT and message.calls:
            pending = [call.id for call in message.calls]
            owner = index
    if pending:
        raise ValidationError(f"{what}[{owner}] made calls that have no result: {_shown(pending)}")
    return items


def _shown(call_ids: Sequence[str]) -> str:
    shown = ", ".join(repr(call_id) for call_id in call_ids[:_SHOWN_CALLS])
    more = len(call_ids) - _SHOWN_CALLS
    return shown + (f" and {more} more" if more > 0 else "")


def plan_collapse(sections: int, cap: int | None) -> int:
    """How many of the oldest sections merge into one so at most ``cap`` remain (0: none).

    ``cap=None`` means no cap. A cap below 1 raises :class:`ValidationError`.
    """
    if cap is None:
        return 0
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ValidationError(f"the sections cap must be an integer >= 1, not {cap!r}")
    return sections - cap + 1 if sections > cap else 0


def summary_inputs(summaries: Iterable[str]) -> tuple[Message, ...]:
    """Section summaries as the messages a summarizer is given for a rollup or a merge: one
    assistant message each, raw (without the recap label)."""
    return tuple(Message(role=Role.ASSISTANT, content=text) for text in summaries)


# ---------------------------------------------------------------------------------------------
# Rendering


def reference_text(
    label: str, *, summary: str | None = None, messages: Sequence[Message] = ()
) -> str:
    """The text block that refers to another conversation without merging its turns::

        [Reference -- conversation "<label>" -- NOT part of this conversation]
        Summary: <summary>
        Relevant messages:
        - user: ...

    The summary line appears when ``summary`` is given, the messages when there are any.
    """
    lines = [f'[Reference -- conversation "{label}" -- NOT part of this conversation]']
    if summary:
        lines.append(f"Summary: {summary}")
    if messages:
        lines.append("Relevant messages:")
        lines.extend(f"- {m.role.value}: {m.content}" for m in messages)
    return "\n".join(lines)


def render_for_provider(messages: Iterable[Message]) -> tuple[Message, ...]:
    """``messages`` as a provider should see them: an interrupted assistant answer gets
    :data:`INTERRUPTED_NOTE` appended to its content (a copy; the originals are untouched)."""
    given = messages if type(messages) is tuple else tuple(messages)
    if not any(map(_INTERRUPTED, given)):  # (the common case, at C speed: none is)
        return given
    return tuple(_annotated(message) if message.interrupted else message for message in given)


_INTERRUPTED = operator.attrgetter("interrupted")


def _annotated(message: Message) -> Message:
    content = f"{message.content}\n\n{INTERRUPTED_NOTE}" if message.content else INTERRUPTED_NOTE
    return attrs.evolve(message, content=content)


def estimate_messages(messages: Iterable[Message]) -> int:
    """An estimate of the prompt tokens of ``messages``: per message
    :data:`MESSAGE_TOKEN_OVERHEAD` plus its text (content, thinking is not sent) and call
    arguments by :func:`~protocols.accounting.estimate_tokens`, plus :data:`IMAGE_TOKEN_ESTIMATE`
    per image. Monotonic: more or longer messages never estimate lower."""
    total = 0
    for message in messages:
        total += MESSAGE_TOKEN_OVERHEAD + estimate_tokens(message.content)
        total += IMAGE_TOKEN_ESTIMATE * len(message.images)
        for call in message.calls:
            total += estimate_tokens(call.name) + estimate_tokens(dumps(call.arguments))
    return total
