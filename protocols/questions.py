"""Questions for the human: a typed :class:`Question` and the strict check of its answer.

A tool (the built-in ``ask_user``, or any tool through ``RunContext.ask``) may put a question to
the human running the agent instead of a yes/no approval. A question has a ``kind``:

* ``"text"``: any non-blank text (at most :data:`MAX_ANSWER_CHARS` characters);
* ``"choice"``: exactly one of ``options``;
* ``"choices"``: one or more of ``options``, each at most once;
* ``"number"``: a finite number, within ``min``/``max`` when given, a whole number when
  ``integer``.

:func:`check_answer` is the one judge of an answer, used in process, by durable jobs (``jobs
answer``), the relay and A2A alike: it is pure, strict (a string is never a number, ``True``
never ``1``, an option must match exactly) and returns the answer in its canonical form
(``choices`` in the order of ``options``; an integral number as an ``int`` when ``integer``).
:func:`parse_answer` reads an answer typed as text (a terminal, a command line, a chat message)
and hands it to :func:`check_answer`. Both raise :class:`~protocols.errors.ValidationError`
whose message says what was wrong and what would be accepted. Everything here is synchronous
and does no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, TypeAlias, get_args

import attrs

from ._json import loads
from .errors import ProtocolError, ValidationError

__all__ = [
    "MAX_ANSWER_CHARS",
    "MAX_OPTIONS",
    "Answer",
    "Question",
    "QuestionKind",
    "check_answer",
    "parse_answer",
    "question_from_arguments",
    "question_schema",
]

#: What kind of answer a question wants.
QuestionKind: TypeAlias = Literal["text", "choice", "choices", "number"]

_KINDS: Final[tuple[str, ...]] = get_args(QuestionKind)

#: An answer as :func:`check_answer` returns it: text or an option (``str``), the options
#: chosen (``list[str]``), or a number.
Answer: TypeAlias = str | list[str] | int | float

#: The longest text answer, prompt or option accepted (characters).
MAX_ANSWER_CHARS: Final = 100_000
#: The most options a question may offer.
MAX_OPTIONS: Final = 100

_SHOWN: Final = 60  # how much of a refused answer a message quotes


def _quote(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _kind(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or value not in _KINDS:
        allowed = ", ".join(repr(kind) for kind in _KINDS)
        raise ValidationError(f"Question.kind must be one of {allowed}, not {_quote(value)}")


def _prompt(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("Question.prompt must be a non-blank str")
    if len(value) > MAX_ANSWER_CHARS:
        raise ValidationError(f"Question.prompt is longer than {MAX_ANSWER_CHARS} characters")


def _to_options(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ValidationError("Question.options must be a sequence of str")
    options = tuple(value)
    if len(options) > MAX_OPTIONS:
        raise ValidationError(f"Question.options holds more than {MAX_OPTIONS} options")
    for index, option in enumerate(options):
        if not isinstance(option, str) or not option.strip():
            raise ValidationError(f"Question.options[{index}] must be a non-blank str")
        if len(option) > MAX_ANSWER_CHARS:
            raise ValidationError(
                f"Question.options[{index}] is longer than {MAX_ANSWER_CHARS} characters"
            )
        if option in options[:index]:
            raise ValidationError(f"Question.options[{index}] repeats {_quote(option)}")
    return options


def _bound(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not (_number(value) and math.isfinite(value)):  # type: ignore[arg-type]
        raise ValidationError(
            f"Question.{attribute.name} must be a finite number or None, not {_quote(value)}"
        )


@attrs.frozen
class Question:
    """A question for the human (see the module docstring for the kinds).

    ``prompt`` is what the human reads; ``options`` the choices of a ``choice`` or ``choices``
    question (at least two for ``choice``, at least one for ``choices``, distinct, in the order
    shown); ``min``, ``max`` and ``integer`` bound a ``number``. Validated at construction: a
    field that does not fit the kind (options on a number, ``min`` on a text) raises
    :class:`~protocols.errors.ValidationError` naming it.
    """

    prompt: str = attrs.field(validator=_prompt)
    kind: QuestionKind = attrs.field(default="text", validator=_kind)
    options: tuple[str, ...] = attrs.field(default=(), converter=_to_options)
    min: float | None = attrs.field(default=None, validator=_bound)
    max: float | None = attrs.field(default=None, validator=_bound)
    integer: bool = False

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.integer, bool):
            raise ValidationError("Question.integer must be a bool")
        if self.kind == "choice" and len(self.options) < 2:
            raise ValidationError("a 'choice' question needs at least two options")
        if self.kind == "choices" and not self.options:
            raise ValidationError("a 'choices' question needs at least one option")
        if self.kind in ("text", "number") and self.options:
            raise ValidationError(f"a {self.kind!r} question takes no options")
        if self.kind != "number" and (self.min is not None or self.max is not None or self.integer):
            raise ValidationError(
                f"min, max and integer are for a 'number' question, not {self.kind!r}"
            )
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValidationError(f"Question.min ({self.min:g}) is above max ({self.max:g})")

    def expects(self) -> str:
        """What an answer must be, in words (for a prompt, and for a refusal's message)."""
        if self.kind == "text":
            return "any non-blank text"
        if self.kind == "choice":
            return "one of " + ", ".join(repr(option) for option in self.options)
        if self.kind == "choices":
            return "one or more of " + ", ".join(repr(option) for option in self.options)
        what = "a whole number" if self.integer else "a number"
        if self.min is not None and self.max is not None:
            return f"{what} from {self.min:g} to {self.max:g}"
        if self.min is not None:
            return f"{what} >= {self.min:g}"
        if self.max is not None:
            return f"{what} <= {self.max:g}"
        return what


def _refused(question: Question, problem: str) -> ValidationError:
    return ValidationError(f"answer refused: {problem} (expected {question.expects()})")


def check_answer(question: Question, raw: object) -> Answer:
    """``raw`` checked against ``question``, in its canonical form (see the module docstring).

    Raises :class:`~protocols.errors.ValidationError` (``"answer refused: <problem> (expected
    <what>)"``) for an answer of the wrong type, not among the options, out of range, blank, or
    too long. Pure: the same question and answer always give the same outcome.
    """
    if not isinstance(question, Question):
        raise ValidationError(f"check_answer needs a Question, not {type(question).__name__}")
    kind = question.kind
    if kind == "text":
        if not isinstance(raw, str):
            raise _refused(question, f"{_quote(raw)} is not text")
        if not raw.strip():
            raise _refused(question, "the answer is blank")
        if len(raw) > MAX_ANSWER_CHARS:
            raise _refused(question, f"the answer is longer than {MAX_ANSWER_CHARS} characters")
        return raw
    if kind == "choice":
        if not isinstance(raw, str):
            raise _refused(question, f"{_quote(raw)} is not one option")
        if raw not in question.options:
            raise _refused(question, f"{_quote(raw)} is not an option")
        return raw
    if kind == "choices":
        if isinstance(raw, str | bytes) or not isinstance(raw, list | tuple):
            raise _refused(question, f"{_quote(raw)} is not a list of options")
        if not raw:
            raise _refused(question, "no option was chosen")
        chosen: set[str] = set()
        for item in raw:
            if not isinstance(item, str) or item not in question.options:
                raise _refused(question, f"{_quote(item)} is not an option")
            if item in chosen:
                raise _refused(question, f"{_quote(item)} is chosen twice")
            chosen.add(item)
        return [option for option in question.options if option in chosen]
    # A number.
    if not _number(raw):
        raise _refused(question, f"{_quote(raw)} is not a number")
    assert isinstance(raw, int | float)
    if not math.isfinite(raw):
        raise _refused(question, f"{_quote(raw)} is not a finite number")
    if question.integer and isinstance(raw, float):
        if not raw.is_integer():
            raise _refused(question, f"{raw!r} is not a whole number")
        raw = int(raw)
    if question.min is not None and raw < question.min:
        raise _refused(question, f"{raw!r} is below {question.min:g}")
    if question.max is not None and raw > question.max:
        raise _refused(question, f"{raw!r} is above {question.max:g}")
    return raw


def parse_answer(question: Question, text: str) -> Answer:
    """An answer typed as ``text``, read for ``question`` and checked (:func:`check_answer`).

    ``text`` is the answer itself for ``text`` and ``choice`` (a choice matches an option
    exactly, surrounding blanks aside); for ``choices``, a JSON array of options or options
    separated by commas (an option that holds a comma needs the JSON form); for ``number``, a
    JSON number (``42``, ``-1.5``, ``1e3``). Raises :class:`~protocols.errors.ValidationError`.
    """
    if not isinstance(text, str):
        raise ValidationError(f"parse_answer needs the answer's text, not {_quote(text)}")
    kind = question.kind
    if kind == "text":
        return check_answer(question, text)
    if kind == "choice":
        return check_answer(question, text.strip())
    if kind == "choices":
        stripped = text.strip()
        if stripped.startswith("["):
            try:
                items = loads(stripped)
            except ProtocolError as error:
                raise _refused(question, f"{_quote(text)} is not a JSON array") from error
            return check_answer(question, items)
        return check_answer(question, [part.strip() for part in text.split(",") if part.strip()])
    try:
        number = loads(text.strip())
    except ProtocolError:
        raise _refused(question, f"{_quote(text)} is not a number") from None
    return check_answer(question, number)


def question_schema() -> dict[str, Any]:
    """The JSON Schema of a question as a model writes it (the ``ask_user`` tool's
    parameters): ``question`` (the prompt), ``kind``, ``options``, ``min``, ``max``,
    ``integer``. Read one with :func:`question_from_arguments`."""
    return {
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "What to ask the user."},
            "kind": {
                "type": "string",
                "enum": list(_KINDS),
                "description": (
                    "The answer wanted: free text, one of the options, several of the options, "
                    "or a number. Default: text."
                ),
            },
            "options": {
                "type": "array",
                "items": {"type": "string"},
                "description": "The options to choose from (for kind choice or choices).",
            },
            "min": {"type": "number", "description": "The smallest number allowed."},
            "max": {"type": "number", "description": "The largest number allowed."},
            "integer": {"type": "boolean", "description": "Only whole numbers."},
        },
        "required": ["question"],
        "additionalProperties": False,
    }


def question_from_arguments(arguments: Mapping[str, Any]) -> Question:
    """The :class:`Question` a model's call of the question tool describes (its arguments as
    :func:`question_schema` says). Raises :class:`~protocols.errors.ValidationError` for a
    question that cannot be asked (an unknown field, options on a number, ...)."""
    if not isinstance(arguments, Mapping):
        raise ValidationError("a question's arguments must be an object")
    known = {"question", "kind", "options", "min", "max", "integer"}
    unknown = sorted(str(key) for key in arguments if key not in known)
    if unknown:
        raise ValidationError(f"a question has no field {', '.join(unknown)}")
    prompt = arguments.get("question")
    options = arguments.get("options", ())
    if options is None:
        options = ()
    return Question(
        prompt,  # type: ignore[arg-type]  # validated by Question
        kind=arguments.get("kind", "text"),
        options=options,
        min=arguments.get("min"),
        max=arguments.get("max"),
        integer=arguments.get("integer", False),
    )
