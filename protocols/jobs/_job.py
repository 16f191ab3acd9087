"""``AgentJob``: a run described as data -- stored, shown, retried and run on another machine."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from .._json import check_json
from ..accounting import TokenBudget
from ..errors import ValidationError
from ..messages import Message
from ..settings import ModelSettings, SettingsLike

__all__ = ["MAX_CHILDREN", "MAX_DEPTH", "AgentJob"]

#: Children one job may declare (each becomes a job of its own).
MAX_CHILDREN = 256
#: How deep declared children may nest.
MAX_DEPTH = 8


def _name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip() or len(value) > 200:
        raise ValidationError(
            f"AgentJob.{attribute.name} must be a non-empty name of at most 200 characters, "
            f"not {value!r}"
        )


def _optional_name(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None:
        _name(instance, attribute, value)


def _messages(value: Iterable[Message]) -> tuple[Message, ...]:
    if isinstance(value, Message | str | bytes | dict) or not isinstance(value, Iterable):
        raise ValidationError(
            f"AgentJob.input must be a sequence of Messages, not {type(value).__name__}"
        )
    return tuple(value)


def _check_input(instance: object, attribute: attrs.Attribute[Any], value: tuple[Any, ...]) -> None:
    for message in value:
        if not isinstance(message, Message):
            raise ValidationError(f"AgentJob.input holds Messages, not {type(message).__name__}")


def _limit(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
        raise ValidationError(f"AgentJob.limit must be an integer >= 0 or None, not {value!r}")


def _timeout(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ValidationError(f"AgentJob.timeout must be a number of seconds > 0, not {value!r}")


def _budget(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, TokenBudget):
        raise ValidationError("AgentJob.budget must be a TokenBudget or None")


def _children(value: Iterable[AgentJob]) -> tuple[AgentJob, ...]:
    if isinstance(value, AgentJob | str | bytes | dict) or not isinstance(value, Iterable):
        raise ValidationError(
            f"AgentJob.children must be a sequence of AgentJobs, not {type(value).__name__}"
        )
    return tuple(value)


def _check_children(
    instance: object, attribute: attrs.Attribute[Any], value: tuple[Any, ...]
) -> None:
    if len(value) > MAX_CHILDREN:
        raise ValidationError(f"AgentJob.children: at most {MAX_CHILDREN}, not {len(value)}")
    for child in value:
        if not isinstance(child, AgentJob):
            raise ValidationError(f"AgentJob.children holds AgentJobs, not {type(child).__name__}")
        if child.depth() >= MAX_DEPTH:
            raise ValidationError(f"AgentJob.children nest deeper than {MAX_DEPTH} levels")


def _settings(value: SettingsLike) -> ModelSettings | None:
    return None if value is None else ModelSettings.of(value)


def _metadata(value: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError("AgentJob.metadata must be a JSON object")
    checked = check_json(dict(value), what="AgentJob.metadata")
    assert isinstance(checked, dict)
    return checked


@attrs.frozen
class AgentJob:
    """What to run: the ``agent`` (a name in the worker's registry) given ``input``.

    ``limit``, ``timeout`` (seconds per attempt) and ``budget`` override the agent's own;
    ``conversation`` names a thread: jobs naming the same one run one at a time, in the order
    they were admitted (interrupting ones first), each seeing the ones before it; ``children``
    are jobs that run first, each a job of its own, whose results the parent receives in order;
    ``metadata`` is the caller's JSON, kept as given; ``settings`` are the model's
    :class:`~protocols.settings.ModelSettings` for this job (or a mapping of their fields),
    overriding the agent's field by field (a worker from before them refuses a job that sets
    them: it decodes jobs strictly).

    Guarantees: an ``AgentJob`` is valid when it exists (every refusal is a
    :class:`~protocols.errors.ValidationError` naming the field), and ``decode(AgentJob,
    encode(job)) == job`` (strict: unknown fields refused).
    """

    agent: str = attrs.field(validator=_name)
    input: tuple[Message, ...] = attrs.field(
        default=(), converter=_messages, validator=_check_input
    )
    limit: int | None = attrs.field(default=None, validator=_limit)
    timeout: float | None = attrs.field(default=None, validator=_timeout)
    budget: TokenBudget | None = attrs.field(default=None, validator=_budget)
    conversation: str | None = attrs.field(default=None, validator=_optional_name)
    children: tuple[AgentJob, ...] = attrs.field(
        default=(), converter=_children, validator=_check_children
    )
    metadata: dict[str, Any] = attrs.field(factory=dict, converter=_metadata)
    settings: ModelSettings | None = attrs.field(default=None, converter=_settings)

    @classmethod
    def ask(cls, agent: str, text: str, **fields: Any) -> AgentJob:
        """A job giving ``agent`` one user message ``text``."""
        return cls(agent, (Message.user(text),), **fields)

    def depth(self) -> int:
        """1 for a job without children; 1 + the deepest child's otherwise."""
        return 1 + max((child.depth() for child in self.children), default=0)
