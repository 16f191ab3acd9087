"""What the ``trio-agents`` command line says of an error: one line for an error the user can
act on (:func:`describe_error`), and how an error is looked into (its leaves, Ctrl-C, an
``--app``'s own failure). Every command's module may import this one; it imports none of them at
import time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._jobs import AppError

__all__ = ["describe_error"]


def describe_error(error: BaseException, where: str | None = None) -> str | None:
    """One line saying what went wrong, for an error the user can act on: a trio-agents error
    (a model that cannot be reached or refuses the key, a store that cannot be opened, a bad
    setting) or an operating-system error, alone or grouped. ``None`` for anything else -- a
    bug, whose traceback should be seen. ``where`` is the model's base URL, named when the model
    cannot be reached."""
    import httpx  # noqa: PLC0415 - loaded (by the providers) before any such error

    from protocols.errors import AgentsError, ProviderError  # noqa: PLC0415

    leaves = list(_leaves(error))
    lines: list[str] = []
    for leaf in leaves:
        if isinstance(leaf, ProviderError) and leaf.code in ("transport", "pool_timeout"):
            at = f" at {where}" if where else ""
            lines.append(f"cannot reach the model{at}: {leaf}")
        elif isinstance(leaf, ProviderError) and leaf.code == "auth":
            at = f" at {where}" if where else ""
            lines.append(
                f"the model{at} refused the API key (--api-key or $OPENAI_API_KEY): {leaf}"
            )
        elif isinstance(leaf, AgentsError):
            lines.append(str(leaf))
        elif isinstance(leaf, OSError):
            lines.append(_os_error(leaf))
        elif isinstance(leaf, httpx.InvalidURL):  # $OPENAI_BASE_URL is not checked by argparse
            lines.append(f"invalid URL{f' {where}' if where else ''}: {leaf}")
        else:
            return None
    if not lines:
        return None
    distinct = list(dict.fromkeys(" ".join(line.split()) for line in lines))
    more = f" (and {len(distinct) - 1} other error(s))" if len(distinct) > 1 else ""
    return distinct[0] + more


def _leaves(error: BaseException) -> Iterator[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        for member in error.exceptions:
            yield from _leaves(member)
    else:
        yield error


def _os_error(error: OSError) -> str:
    if error.strerror and error.filename is not None:
        return f"{error.filename}: {error.strerror}"
    return error.strerror or str(error) or type(error).__name__


def _app_error(error: BaseException) -> AppError | None:
    from ._jobs import AppError  # noqa: PLC0415

    return next((leaf for leaf in _leaves(error) if isinstance(leaf, AppError)), None)


def _interrupted(error: BaseException) -> bool:
    """Whether ``error`` is Ctrl-C (alone, or grouped with the cancellations it caused)."""
    import trio  # noqa: PLC0415 - loaded by every command already

    leaves = list(_leaves(error))
    return any(isinstance(leaf, KeyboardInterrupt) for leaf in leaves) and all(
        isinstance(leaf, KeyboardInterrupt | trio.Cancelled) for leaf in leaves
    )


def _unchain(error: BaseException) -> None:
    """Show ``error``'s traceback once: a context manager that unwrapped it from an exception
    group (the runtime's) re-raised it while handling that group, which Python would print
    first, as "During handling of the above exception ..."."""
    context = error.__context__
    if isinstance(context, BaseExceptionGroup) and any(leaf is error for leaf in _leaves(context)):
        error.__suppress_context__ = True
