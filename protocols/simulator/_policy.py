"""The simulated model: what it answers to a request (pure and deterministic)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._json import dumps, loads
from ..accounting import estimate_tokens
from ..errors import ProtocolError
from ..messages import FinishReason, Usage
from ._request import (
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


def answer(request: SimRequest) -> SimAnswer:
    """What the simulator answers to ``request`` (see the module docstring for the policy).

    Guarantees: deterministic (equal requests give equal answers); never raises for a parsed
    request; ``finish`` is ``tool_calls`` exactly when there are calls, ``length`` when the output
    cap cut the answer, else ``stop``; usage is consistent (``total = prompt + completion``).
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
    if request.max_tokens is not None and not calls and len(pieces) > request.max_tokens:
        pieces = pieces[: request.max_tokens]
        finish = FinishReason.LENGTH
    prompt = sum(estimate_tokens(turn.text) for turn in request.turns) + len(request.tools)
    completion = (
        len(pieces)
        + estimate_tokens(thinking)
        + sum(estimate_tokens(dumps(call.arguments)) for call in calls)
    )
    return SimAnswer(
        thinking=thinking,
        pieces=pieces,
        calls=tuple(calls),
        finish=finish,
        usage=Usage(prompt=prompt, completion=completion),
    )


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
        if match.group(2):
            try:
                parsed = loads(match.group(2))
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


def _describe(call: SimCall) -> str:
    return f"{call.name}({dumps(call.arguments)})"
