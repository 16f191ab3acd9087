"""How each kind of run event's data is checked and decoded when it comes off a wire (the bounds on
ids and texts, a checker per field, per kind), and which of its fields hold data-model objects;
:mod:`protocols.live` reads and writes events with them."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, Final

from .codec import from_json
from .errors import ProtocolError
from .messages import AgentResult, Message, ProviderResult, ToolCall, ToolResult, Usage
from .questions import Question

#: The longest id or name an event's data may hold (a run id, a call id, an agent's or a tool's
#: name, a status), in characters.
MAX_ID_CHARS: Final = 1_000
#: The longest text an event's data may hold (a delta, a reason, an error's message), in
#: characters. (Data-model objects -- a tool call, a result -- are bounded by the frame or
#: record that carries them.)
MAX_TEXT_CHARS: Final = 1_048_576
#: The most approvals one ``awaiting_input`` event may list.
MAX_ASKED: Final = 1_000
#: The largest seq on a wire (what ``Last-Event-ID`` can carry: 18 digits).
MAX_SEQ: Final = 10**18 - 1

_Check = Callable[[Any, str], Any]


def _refuse(path: str, problem: str) -> ProtocolError:
    return ProtocolError(f"an event's {path} {problem}", code="decode")


def _text(limit: int = MAX_TEXT_CHARS, *, optional: bool = False) -> _Check:
    def check(value: Any, path: str) -> Any:
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise _refuse(path, "must be a string" + (" or null" if optional else ""))
        if len(value) > limit:
            raise _refuse(path, f"is longer than {limit} characters")
        return value

    return check


def _choice(*choices: str) -> _Check:
    def check(value: Any, path: str) -> Any:
        if value not in choices:
            raise _refuse(path, f"must be one of {', '.join(choices)}")
        return value

    return check


def _int(minimum: int, maximum: int = MAX_SEQ) -> _Check:
    def check(value: Any, path: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _refuse(path, "must be an int")
        if not minimum <= value <= maximum:
            raise _refuse(path, f"must be between {minimum} and {maximum}")
        return value

    return check


def _seconds(value: Any, path: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _refuse(path, "must be a number")
    if not (math.isfinite(value) and value >= 0):
        raise _refuse(path, "must be a finite number >= 0")
    return float(value)


def _flag(value: Any, path: str) -> Any:
    if not isinstance(value, bool):
        raise _refuse(path, "must be true or false")
    return value


def _object(cls: Any, *, optional: bool = False) -> _Check:
    def check(value: Any, path: str) -> Any:
        if value is None:
            if optional:
                return None
            raise _refuse(path, f"must be a {cls.__name__}")
        try:
            return from_json(cls, value)
        except ProtocolError as error:
            raise _refuse(path, f"is not a {cls.__name__}: {error.message}") from None

    return check


def _as_json(cls: Any) -> _Check:
    """A ``cls`` as JSON, checked as one and kept as the JSON it is (what a relay run's log
    holds: the frames' own form)."""

    def check(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise _refuse(path, f"must be a {cls.__name__} (an object)")
        try:
            from_json(cls, value)
        except ProtocolError as error:
            raise _refuse(path, f"is not a {cls.__name__}: {error.message}") from None
        return value

    return check


def _fields(spec: Mapping[str, _Check], optional: Mapping[str, _Check] | None = None) -> _Check:
    """An object with exactly the fields of ``spec`` (and any of ``optional``), each
    checked."""
    extra = optional or {}

    def check(value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise _refuse(path, "must be an object")
        missing = [key for key in spec if key not in value]
        if missing:
            raise _refuse(path, f"lacks {', '.join(missing)}")
        unknown = [key for key in value if key not in spec and key not in extra]
        if unknown:
            shown = ", ".join(repr(key[:40]) for key in sorted(unknown)[:5])
            raise _refuse(path, f"has unknown fields {shown}")
        out = {key: spec[key](value[key], f"{path}.{key}") for key in spec}
        for key, checked in extra.items():
            if key in value:
                out[key] = checked(value[key], f"{path}.{key}")
        return out

    return check


def _either(key: str, having: _Check, otherwise: _Check) -> _Check:
    """``having`` checks an object with a field ``key``; ``otherwise`` anything else."""

    def check(value: Any, path: str) -> Any:
        if isinstance(value, dict) and key in value:
            return having(value, path)
        return otherwise(value, path)

    return check


def _list(item: _Check, limit: int) -> _Check:
    def check(value: Any, path: str) -> Any:
        if not isinstance(value, list):
            raise _refuse(path, "must be a list")
        if len(value) > limit:
            raise _refuse(path, f"has more than {limit} items")
        return [item(each, f"{path}[{index}]") for index, each in enumerate(value)]

    return check


def _answer(value: Any, path: str) -> Any:
    """A question's answer: text, a list of options, or a finite number."""
    if isinstance(value, str):
        return _TEXT(value, path)
    if isinstance(value, list):
        return _list(_TEXT, MAX_ASKED)(value, path)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return value
    raise _refuse(path, "must be text, a list of text or a finite number")


_ID = _text(MAX_ID_CHARS)
_MAYBE_ID = _text(MAX_ID_CHARS, optional=True)
_TEXT = _text()
_MAYBE_TEXT = _text(optional=True)

#: Per kind, its data's fields (all of them, none other) and how each is checked and decoded:
#: what :class:`RunEvent`'s docstring lists (:data:`_VARIANTS`: the kinds whose data has
#: another form too).
_DATA: Final[dict[str, dict[str, _Check]]] = {
    "started": {"agent": _MAYBE_ID},
    "turn": {"turn": _int(0)},
    "content": {"text": _TEXT},
    "thinking": {"text": _TEXT},
    "tool_call": {"call": _object(ToolCall)},
    "tool_result": {"result": _object(ToolResult)},
    "progress": {"call_id": _MAYBE_ID, "text": _TEXT},
    "usage": {
        "usage": _object(Usage, optional=True),
        "estimated": _flag,
        "finish": _MAYBE_ID,
    },
    "retry": {"attempt": _int(0), "delay": _seconds, "reason": _TEXT},
    "fallback": {"provider": _ID, "next": _ID, "reason": _TEXT, "rewind": _flag},
    "guard": {"reason": _TEXT},
    "guardrail": {
        "name": _ID,
        "kind": _choice("input", "output", "tool"),
        "reason": _TEXT,
        "call_id": _MAYBE_ID,
    },
    "fault": {"reason": _TEXT},
    "message": {"message": _object(Message)},
    "approval_requested": {"call_id": _ID, "tool": _ID, "reason": _MAYBE_TEXT},
    "approval_answered": {"call_id": _ID, "allow": _flag, "reason": _TEXT},
    "subagent_started": {"call_id": _MAYBE_ID, "agent": _MAYBE_ID, "run_id": _MAYBE_ID},
    "subagent_finished": {"call_id": _MAYBE_ID, "run_id": _MAYBE_ID, "status": _MAYBE_ID},
    "handoff": {"call_id": _MAYBE_ID, "agent": _MAYBE_ID},
    "compaction": {"reason": _choice("window", "overflow"), "replaced": _int(0)},
    "takeover": {"fence": _int(0), "reason": _choice("takeover", "retry", "answered")},
    "rewind": {"to": _int(0)},
    "gap": {"first": _int(1)},
    "finished": {"result": _object(AgentResult)},
    "cancelled": {"result": _object(AgentResult, optional=True)},
    "failed": {
        "error": _fields({"type": _ID, "code": _MAYBE_ID, "message": _TEXT}),
    },
    "awaiting_input": {
        "calls": _list(
            _fields(
                {"call_id": _ID, "tool": _ID, "reason": _TEXT},
                optional={"question": _as_json(Question)},
            ),
            MAX_ASKED,
        ),
    },
}
#: A relay run (a provider call the relay made a run of) ends with the provider's
#: ``response`` rather than an agent's ``result``, asks approvals with the ``call`` itself, and
#: says whether its failure may be retried.
_VARIANTS: Final[dict[str, _Check]] = {
    "finished": _either(
        "response", _fields({"response": _as_json(ProviderResult)}), _fields(_DATA["finished"])
    ),
    "cancelled": _either(
        "response", _fields({"response": _as_json(ProviderResult)}), _fields(_DATA["cancelled"])
    ),
    "approval_requested": _fields(
        _DATA["approval_requested"],
        optional={"call": _as_json(ToolCall), "question": _as_json(Question)},
    ),
    "approval_answered": _fields(_DATA["approval_answered"], optional={"answer": _answer}),
    "failed": _fields(
        {
            "error": _fields(
                {"type": _ID, "code": _MAYBE_ID, "message": _TEXT}, optional={"retryable": _flag}
            )
        }
    ),
}
_CHECKS: Final = {kind: _VARIANTS.get(kind) or _fields(spec) for kind, spec in _DATA.items()}


#: Per kind, the fields that hold data-model objects (encoded with :func:`to_json`).
_OBJECTS: Final[dict[str, frozenset[str]]] = {
    "tool_call": frozenset({"call"}),
    "tool_result": frozenset({"result"}),
    "usage": frozenset({"usage"}),
    "message": frozenset({"message"}),
    "finished": frozenset({"result"}),
    "cancelled": frozenset({"result"}),
}
_NONE: Final[frozenset[str]] = frozenset()
