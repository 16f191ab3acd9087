"""The simulated model: what it answers to a request (pure and deterministic)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

import attrs

from .._json import dumps, loads
from ..accounting import estimate_tokens
from ..errors import ProtocolError
from ..messages import FinishReason, Usage
from ._types import (
    _CALL,
    _COUNT,
    _SUM,
    _WORDS,
    MAX_COUNT_TO,
    SimAnswer,
    SimCall,
    SimRequest,
    SimTurn,
)

# ---------------------------------------------------------------------------------------------
# The policy


def answer(
    request: SimRequest, *, max_tokens: int | None = None, blocked: Sequence[str] = ()
) -> SimAnswer:
    """What the simulator answers to ``request`` (see the module docstring for the policy).

    ``max_tokens`` is the server's own output cap (the request's, when smaller, wins);
    ``blocked`` are the words its content filter blocks (matched case-insensitively; Ollama's
    native format has no filter and is never filtered).

    Guarantees: deterministic (equal requests give equal answers); never raises for a parsed
    request; ``finish`` is ``content_filter`` when the filter cut the answer (just before the
    first blocked word, in its text or in a call's arguments), ``length`` when the output cap
    cut it (text after the cap's count of deltas; calls once their arguments' tokens exceed it
    -- the call the cap falls in is sent with its arguments' text cut, later ones not at all),
    else ``tool_calls`` exactly when there are calls and ``stop`` otherwise; usage is
    consistent (``total = prompt + completion``).
    """
    tools = _usable_tools(request)
    last = next((turn for turn in reversed(request.turns) if turn.role != "system"), None)
    calls: list[SimCall] = []
    plan: str
    if last is None:
        text = "Hello! I am the trio-agents simulator. Ask me something."
        plan = "There is no question yet, so I will introduce myself."
    elif last.role == "tool":
        results = _trailing_results(request.turns)
        if len(results) == 1:
            text = f"The answer is {results[0]}."
        else:
            text = f"The tools returned: {', '.join(results)}."
        plan = "The tools have answered, so I will report their results."
    else:
        question = last.text.strip()
        calls = _calls_for(question, tools, request.tool_choice) if last.role == "user" else []
        count = _COUNT.search(question)
        sums = _SUM.findall(question)
        if calls:
            text = ""
            plan = "I will call " + ", ".join(_describe(call) for call in calls) + "."
        elif count:
            digits = count.group(1).lstrip("0") or "0"
            n = MAX_COUNT_TO if len(digits) > len(str(MAX_COUNT_TO)) else int(digits)
            n = min(n, MAX_COUNT_TO)
            text = " ".join(str(i) for i in range(1, n + 1))
            plan = f"The user wants me to count to {n}, one number at a time."
        elif sums:
            text = " ".join(f"{a} + {b} = {int(a) + int(b)}." for a, b in sums)
            plan = "I can add these numbers myself."
        else:
            text = f"You said: {question}" if question else "You said nothing."
            plan = "I will repeat what the user said."
    thinking = plan if request.think else ""
    pieces = tuple(_WORDS.findall(text))
    finish = FinishReason.TOOL_CALLS if calls else FinishReason.STOP
    words = tuple(word.lower() for word in blocked if word) if request.vendor != "ollama" else ()
    if words:
        filtered = _filtered(pieces, calls, words)
        if filtered is not None:
            pieces, calls = filtered
            finish = FinishReason.CONTENT_FILTER
    caps = [cap for cap in (request.max_tokens, max_tokens) if cap is not None]
    cap = min(caps) if caps else None
    if cap is not None and finish is not FinishReason.CONTENT_FILTER:
        if not calls and len(pieces) > cap:
            pieces = pieces[:cap]
            finish = FinishReason.LENGTH
        elif calls:
            capped = _capped(calls, cap)
            if capped is not None:
                calls = capped
                finish = FinishReason.LENGTH
    prompt = sum(estimate_tokens(turn.text) for turn in request.turns) + len(request.tools)
    completion = (
        len(pieces) + estimate_tokens(thinking) + sum(estimate_tokens(call.text) for call in calls)
    )
    return SimAnswer(
        thinking=thinking,
        pieces=pieces,
        calls=tuple(calls),
        finish=finish,
        usage=Usage(prompt=prompt, completion=completion),
    )


def _filtered(
    pieces: tuple[str, ...], calls: list[SimCall], words: tuple[str, ...]
) -> tuple[tuple[str, ...], list[SimCall]] | None:
    """The answer cut just before the first blocked word (``None``: none is in it)."""
    for index, piece in enumerate(pieces):
        if any(word in piece.lower() for word in words):
            return pieces[:index], []
    for index, call in enumerate(calls):
        text = call.text
        found = [at for at in (text.lower().find(word) for word in words) if at >= 0]
        if found:
            return pieces, [*calls[:index], attrs.evolve(call, cut=text[: min(found)])]
    return None


def _capped(calls: list[SimCall], cap: int) -> list[SimCall] | None:
    """The calls cut where their arguments' tokens pass ``cap`` (``None``: they fit)."""
    left = cap
    for index, call in enumerate(calls):
        need = estimate_tokens(call.text)
        if need > left:
            kept = calls[:index]
            if left > 0:  # the call the cap falls in: its arguments cut
                kept.append(attrs.evolve(call, cut=call.text[: left * 4]))
            return kept
        left -= need
    return None


def _usable_tools(request: SimRequest) -> tuple[str, ...]:
    choice = request.tool_choice
    if choice == "none":
        return ()
    if choice not in (None, "required"):
        return tuple(name for name in request.tools if name == choice)
    return request.tools


def _trailing_results(turns: Sequence[SimTurn]) -> list[str]:
    results: list[str] = []
    for turn in reversed(turns):
        if turn.role != "tool":
            break
        results.append(turn.text.strip())
    return results[::-1]


def _calls_for(question: str, tools: tuple[str, ...], choice: str | None) -> list[SimCall]:
    calls: list[SimCall] = []
    for match in _CALL.finditer(question):
        name = match.group(1)
        if name not in tools:
            continue
        arguments: dict[str, Any] = {}
        text = match.group(2) or _nested_object(question, match.end())
        if text:
            try:
                parsed = loads(text)
            except ProtocolError:
                parsed = None
            if isinstance(parsed, dict):
                arguments = parsed
        calls.append(SimCall(name, arguments))
    if not calls and "add" in tools:
        calls = [SimCall("add", {"a": int(a), "b": int(b)}) for a, b in _SUM.findall(question)]
    if not calls and choice is not None and tools:
        calls = [SimCall(tools[0], {})]
    return calls


_WITH = re.compile(r"\s+with\s+(?=\{)", re.IGNORECASE)


def _nested_object(question: str, at: int) -> str | None:
    """The text of ``with {...}`` at ``at`` when the object nests others (``_CALL`` takes flat
    ones only), or None."""
    found = _WITH.match(question, at)
    if found is None:
        return None
    try:
        _, end = json.JSONDecoder().raw_decode(question, found.end())
    except ValueError:
        return None
    return question[found.end() : end]


def _describe(call: SimCall) -> str:
    return f"{call.name}({dumps(call.arguments)})"
