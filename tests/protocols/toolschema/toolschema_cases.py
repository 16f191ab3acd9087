"""Types and tool functions shared by the protocols.toolschema tests. Their annotations are
strings and resolve from this module's globals, as a user's would."""

from __future__ import annotations

import datetime
import enum
from collections.abc import Sequence
from typing import Annotated, Any, Literal, NewType, TypeVar

import attrs

from protocols.toolschema import (
    signature_of,
)

# ---------------------------------------------------------------------------------------------
# Module-level types and tools (annotations are strings here and must resolve from globals)


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Empty(enum.Enum):
    pass


class Pairish(enum.Enum):
    A = (1, 2)


UserId = NewType("UserId", int)
T = TypeVar("T")


@attrs.frozen
class Point:
    """A point on the plane.

    Attributes:
        x: Horizontal
            position.
        y: Vertical position.
    """

    x: float
    y: float = 0.0


@attrs.frozen
class Shape:
    name: str
    points: tuple[Point, ...]
    color: Color = Color.RED
    label: Annotated[str | None, "shown to people"] = None


@attrs.define
class Private:
    _secret: int
    cache: dict[str, int] = attrs.field(init=False, factory=dict)


@attrs.frozen
class Positive:
    value: int = attrs.field()

    @value.validator
    def _check(self, attribute: attrs.Attribute[int], value: int) -> None:
        if value <= 0:
            raise ValueError("value must be positive")


@attrs.frozen
class Node:
    children: list[Node]


@attrs.frozen
class Ping:
    pong: Pong | None


@attrs.frozen
class Pong:
    ping: Ping


class Plain:
    pass


def search(query: str, limit: int = 10, *, exact: bool = False) -> list[str]:
    """Search the index for documents.

    Matches are ranked by relevance.

    Args:
        query: The text to look for;
            may span several words.
        limit (int): At most this many results.
        exact: Match the whole phrase only.

    Returns:
        The matching document names.

    Raises:
        ValueError: never, really.
    """
    return []


def described(
    amount: Annotated[float, "money, in euros"], note: str = "", *, color: Color = Color.GREEN
) -> None:
    """Pay.

    Args:
        amount: The docstring loses to Annotated.
        note:
            The description starts on the next line.
    """


def undocumented(flag: bool) -> None:
    pass


async def fetch(url: str, retries: int | None = None) -> str:
    """Fetch a URL."""
    return url


def rich(  # noqa: PLR0917
    text: str,
    count: int,
    ratio: float,
    flag: bool,
    maybe: int | None,
    choice: Literal["a", "b", 3],
    color: Color,
    level: Level,
    items: list[str],
    pair: tuple[int, str],
    many: tuple[float, ...],
    table: dict[str, list[int]],
    shape: Shape,
    either: int | str,
    anything: Any,
    user: UserId,
    note: Annotated[str, "a note"] = "x",
    *,
    extra: Shape | None = None,
) -> None:
    """A tool with one parameter of every kind."""


def star_args(*values: int) -> None:
    pass


def star_kwargs(**values: int) -> None:
    pass


def positional(value: int, /) -> None:
    pass


def unannotated(value) -> None:  # type: ignore[no-untyped-def]
    pass


def bad_default(count: int = None) -> None:  # type: ignore[assignment]  # noqa: RUF013
    pass


def bad_attrs_default(point: Point = {"x": 1}) -> None:  # type: ignore[assignment]  # noqa: B006
    pass


def enum_as_text(color: Color = "red") -> None:  # type: ignore[assignment]
    pass


def good_defaults(
    point: Point = Point(1.0),
    color: Color = Color.RED,
    pair: tuple[int, str] = (1, "a"),
    names: Sequence[str] = (),
    ratio: float = 1,
) -> None:
    pass


def unsupported(when: datetime.datetime) -> None:
    pass


def unresolved(thing: Missing) -> None:  # type: ignore[name-defined]  # noqa: F821
    pass


def recursive(node: Node) -> None:
    pass


def badly_named(value: int) -> None:
    pass


badly_named.__name__ = "bad name"


class Methods:
    def lookup(self, key: str) -> str:
        """Look a key up."""
        return key


class CallableTool:
    def __call__(self, n: int) -> int:
        return n


def wrap(schema: dict[str, Any]) -> dict[str, Any]:
    """A one-field object schema ``{"value": schema}``, required and closed."""
    return {
        "type": "object",
        "properties": {"value": schema},
        "required": ["value"],
        "additionalProperties": False,
    }


SEARCH = signature_of(search).parameters
RICH = signature_of(rich)
