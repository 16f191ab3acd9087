"""Where the tests' PostgreSQL comes from.

The server named by ``TRIO_AGENTS_TEST_POSTGRES`` (a ``postgresql://`` URL) when that is set --
the project's machines run one on 127.0.0.1:5432 -- and otherwise a throwaway server this test
process starts itself, once, in a temporary directory, from the server binaries the ``pgserver``
package ships (a test extra), and stops at exit. Nothing is mocked. Each store under test gets a
schema of its own (:func:`new_schema`), dropped when the test ends (:func:`drop_schemas`).
"""

from __future__ import annotations

import os
import tempfile
import uuid
import warnings

ENV = "TRIO_AGENTS_TEST_POSTGRES"

_started: dict[str, str] = {}  # "url": the one this process uses, once known


def postgres_url() -> str:
    """The URL of the PostgreSQL the tests use (see the module docstring)."""
    if "url" not in _started:
        named = os.environ.get(ENV)
        if named:
            _started["url"] = named
        else:
            directory = tempfile.mkdtemp(prefix="trio-agents-postgres-")
            with warnings.catch_warnings():
                # platformdirs warns when XDG_RUNTIME_DIR is unset (containers, CI).
                warnings.simplefilter("ignore")
                import pgserver

                server = pgserver.get_server(directory, cleanup_mode="delete")
            _started["url"] = str(server.get_uri())
    return _started["url"]


def new_schema() -> str:
    """A schema name no other test uses."""
    return f"t_{uuid.uuid4().hex[:20]}"


def drop_schemas(*schemas: str) -> None:
    """Drop ``schemas`` and what they hold (blocking: call it from a thread)."""
    import psycopg

    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
