"""Token counting helpers: the estimate the agent loop charges mid-stream, and the sanitiser that
turns whatever numbers a provider reports into sane token counts.

Text lengths are counted in Unicode code points (Python ``len``), never bytes or UTF-16 units.
"""

from __future__ import annotations

import math

__all__ = ["MAX_COUNT", "estimate_tokens", "sanitize_count"]

#: The largest token count kept; bigger reports are clamped to it (2**53 - 1, the largest integer
#: every JSON reader represents exactly).
MAX_COUNT = 2**53 - 1


def estimate_tokens(text: str) -> int:
    """Estimate the tokens in ``text`` as ``ceil(code points / 4)``.

    Guarantees: 0 for the empty string, at least 1 for any non-empty string, monotonic in length.
    """
    return -(-len(text) // 4)


def sanitize_count(value: object) -> int:
    """Turn a provider-reported token count into a sane non-negative integer.

    Guarantees: the result is an ``int`` in ``[0, MAX_COUNT]``. Missing values (``None``), booleans,
    non-numbers, NaN, infinities and negatives become 0; fractional numbers are rounded up (a
    budget never under-counts); numeric strings such as ``"12"`` are read as numbers; huge values
    are clamped to :data:`MAX_COUNT`.
    """
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int):
        number: float | int = value
    elif isinstance(value, float):
        number = value
    elif isinstance(value, str):
        try:
            number = float(value.strip()) if value.strip() else 0
        except ValueError:
            return 0
    else:
        return 0
    if isinstance(number, float):
        if not math.isfinite(number) or number <= 0:
            return 0
        if number >= MAX_COUNT:
            return MAX_COUNT
        return math.ceil(number)
    return min(max(number, 0), MAX_COUNT)
