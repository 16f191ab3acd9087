"""The old home of the token estimates, kept so that existing imports keep working.

They live with the rest of token accounting now: import them from :mod:`protocols.accounting`
(or from :mod:`protocols`).
"""

from __future__ import annotations

from .accounting import MAX_COUNT, estimate_tokens, sanitize_count

__all__ = ["MAX_COUNT", "estimate_tokens", "sanitize_count"]
