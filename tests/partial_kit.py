"""What the tests of partial JSON share: JSON values compared type for type, and the rule a
partial value keeps with the final one."""

from __future__ import annotations

from typing import Any

from protocols.partial_json import NOTHING


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same JSON types all the way down (``1`` is not ``1.0`` nor ``True``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def consistent(shown: Any, final: Any, *, strings: bool) -> bool:
    """``shown`` is a partial of ``final``: each member or item it shows is the final one's, in
    the final's order; an open container a partial of the final one; with ``strings``, a string
    may be a prefix of the final string."""
    if shown is NOTHING:
        return True
    if isinstance(shown, dict):
        return (
            isinstance(final, dict)
            and list(shown) == [key for key in final if key in shown]
            and all(consistent(v, final[k], strings=strings) for k, v in shown.items())
        )
    if isinstance(shown, list):
        return (
            isinstance(final, list)
            and len(shown) <= len(final)
            and all(consistent(a, b, strings=strings) for a, b in zip(shown, final, strict=False))
        )
    if strings and isinstance(shown, str):
        return isinstance(final, str) and final.startswith(shown)
    return same(shown, final)
