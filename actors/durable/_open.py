"""Run stores by URL: ``sqlite:///PATH`` or ``postgresql://...`` (what ``--store`` takes)."""

from __future__ import annotations

import urllib.parse

from protocols.errors import ConfigError

from .._postgres import redacted, split_url
from ._store import RunStore

__all__ = ["check_store_url", "migrate_store", "open_run_store", "store_path"]

#: The schema a PostgreSQL URL's ``schema`` parameter names when it names none.
DEFAULT_SCHEMA = "public"


def store_path(url: str) -> str:
    """The file a ``sqlite:///PATH`` store URL names (``sqlite:////abs/path`` for an absolute
    one). Raises :class:`~protocols.errors.ConfigError` for anything else."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "sqlite":
        raise ConfigError(f"a SQLite store URL is sqlite:///PATH, not {redacted(url)!r}")
    if not url.startswith("sqlite:///") or parts.netloc:
        raise ConfigError(f"a SQLite store URL is sqlite:///PATH, not {url!r}")
    path = urllib.parse.unquote(url[len("sqlite:///") :])
    if not path:
        raise ConfigError(f"the store URL {url!r} names no file")
    return path


def _postgres(url: str) -> tuple[str, str]:
    return split_url(url, DEFAULT_SCHEMA)


def check_store_url(url: str) -> None:
    """Refuse, before anything starts, a store URL no store opens (a
    :class:`~protocols.errors.ConfigError` saying what is accepted)."""
    try:
        scheme = urllib.parse.urlsplit(url).scheme
        if scheme in ("postgresql", "postgres"):
            urllib.parse.urlsplit(url).port  # noqa: B018 - raises ValueError for a bad port
    except ValueError:  # an unclosed [ of an IPv6 address, a port that is no number
        # (Not the parser's words: they may quote a piece of a password.)
        raise ConfigError(
            f"not a store URL: {redacted(url)!r} (its host or port is malformed; "
            "percent-encode @ / ? # in a password)"
        ) from None
    if scheme == "sqlite":
        store_path(url)
    elif scheme in ("postgresql", "postgres"):
        _postgres(url)
    else:
        raise ConfigError(
            f"unsupported store URL {scheme or redacted(url)!r}: use sqlite:///PATH (a SQLite "
            "file; sqlite:////absolute/path for an absolute one) or postgresql://... "
            "(PostgreSQL; ?schema=NAME for a schema other than public)"
        )


async def open_run_store(url: str, *, create: bool = True) -> RunStore:
    """Open the run store ``url`` names: ``sqlite:///PATH`` (a :class:`SQLiteRunStore`) or
    ``postgresql://USER@HOST/DB[?schema=NAME]`` (a :class:`PostgresRunStore`). Raises
    :class:`~protocols.errors.ConfigError` for another URL, and what the store's ``open``
    raises when it cannot be used. ``create=False`` creates nothing (no file, schema or
    tables): where there is no store it raises :class:`~actors.store.StoreError`
    ``code="missing"``."""
    from ._postgres_store import PostgresRunStore  # noqa: PLC0415
    from ._sqlite_store import SQLiteRunStore  # noqa: PLC0415

    check_store_url(url)
    if urllib.parse.urlsplit(url).scheme == "sqlite":
        return await SQLiteRunStore.open(store_path(url), create=create)
    target, schema = _postgres(url)
    return await PostgresRunStore.open(target, schema=schema, create=create)


async def migrate_store(url: str) -> tuple[int, int]:
    """Bring the schema of the store ``url`` names up to date (creating it if needed); the
    versions before and after (0: there was none). Refuses a schema newer than this code, as
    opening the store does."""
    import trio  # noqa: PLC0415

    from .._postgres import stored_version as postgres_version  # noqa: PLC0415
    from .._sqlite import stored_version as sqlite_version  # noqa: PLC0415

    check_store_url(url)
    if urllib.parse.urlsplit(url).scheme == "sqlite":
        path = store_path(url)
        before = await trio.to_thread.run_sync(sqlite_version, path)
        store = await open_run_store(url)
        await store.aclose()
        after = await trio.to_thread.run_sync(sqlite_version, path)
    else:
        target, schema = _postgres(url)
        before = await trio.to_thread.run_sync(postgres_version, target, schema)
        store = await open_run_store(url)
        await store.aclose()
        after = await trio.to_thread.run_sync(postgres_version, target, schema)
    return before, after
