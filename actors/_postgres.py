"""The PostgreSQL plumbing of the stores: connecting (psycopg 3, its blocking API, driven from a
store's own threads -- never asyncio), the versioned schema and its migrations, and what the
driver's errors are reported as.

psycopg is an optional dependency (``pip install 'trio-agents[postgres]'``): importing this
module never needs it; opening a store does, and says so when it is missing. A URL's password
never appears in an error or a log line: they name the database with :func:`redacted`.

Everything here is synchronous: the stores run it in their threads.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from typing import Any, Final

from protocols.errors import Category, ConfigError, ValidationError

from ._sqlite import JOBS, JOURNAL, TOMBSTONES, StoreError

__all__ = [
    "POSTGRES_SCHEMA_VERSION",
    "STALL_TIMEOUT",
    "check_url",
    "connect",
    "redacted",
    "split_url",
    "stored_version",
    "translate_error",
]

#: The schema version of a PostgreSQL store this code writes; a newer one is refused.
POSTGRES_SCHEMA_VERSION: Final = 6

_META: Final = "trio_agents_meta"

#: Seconds a store's transaction may wait on its process between two statements before the
#: database ends it (and its connection), releasing its locks: a process stopped or frozen
#: mid-transaction (a migration, a group commit) must not keep every other one waiting.
STALL_TIMEOUT: Final = 5.0

# What each migration runs, by the version it produces; all of them in one transaction, under
# an advisory lock, so two processes opening a new database at once migrate it once.
_MIGRATIONS: Final[dict[int, tuple[str, ...]]] = {
    1: (
        f"CREATE TABLE {_META} (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        f"CREATE TABLE {JOBS} ("
        "id TEXT PRIMARY KEY, key TEXT UNIQUE, status TEXT NOT NULL, "
        "sequence BIGINT NOT NULL UNIQUE, record TEXT NOT NULL, "
        "revision BIGINT NOT NULL DEFAULT 0, holder TEXT, held BIGINT, "
        "until DOUBLE PRECISION, thread TEXT, rank INTEGER NOT NULL DEFAULT 3)",
        f"CREATE INDEX {JOBS}_rank ON {JOBS} (status, rank, sequence)",
        f"CREATE INDEX {JOBS}_thread ON {JOBS} (thread, sequence)",
        f"CREATE TABLE {JOURNAL} ("
        "job TEXT NOT NULL, seq BIGINT NOT NULL, entry TEXT NOT NULL, PRIMARY KEY (job, seq))",
        f"CREATE TABLE {TOMBSTONES} ("
        "id TEXT PRIMARY KEY, key TEXT UNIQUE, purged_at DOUBLE PRECISION NOT NULL)",
        # The counters exist from the start: taking a number locks its row.
        f"INSERT INTO {_META} (key, value) VALUES ('job_sequence', '1'), ('job_execution', '1')",
    ),
    # The conversation store's table (as SQLite's, with the run store's in one schema).
    2: (
        "CREATE TABLE trio_agents_conversations ("
        "id TEXT PRIMARY KEY, snapshot TEXT NOT NULL, updated_at DOUBLE PRECISION NOT NULL)",
    ),
    # The counters become sequences, continuing from where the rows left off: a number taken
    # from a row locked it to the commit, and workers' transactions deadlocked over it.
    3: tuple(
        statement
        for name in ("job_sequence", "job_execution")
        for statement in (
            f"CREATE SEQUENCE trio_agents_{name} AS BIGINT MINVALUE 1",
            f"SELECT setval('trio_agents_{name}', "
            f"(SELECT value::BIGINT FROM {_META} WHERE key = '{name}'), false)",
        )
    ),
    # Whether a cancel was requested -- read by a journal append, in its transaction, to refuse
    # work that would start after the cancel was acknowledged. Filled from the records.
    4: (
        f"ALTER TABLE {JOBS} ADD COLUMN cancel BOOLEAN NOT NULL DEFAULT FALSE",
        f"UPDATE {JOBS} SET cancel = TRUE "
        "WHERE (record::jsonb ->> 'cancel_requested')::BOOLEAN IS TRUE",
    ),
    # Numbers are taken through a function that gives the transaction its id first: a page of
    # jobs (actors.durable.RunStore.page) proves a missing number will never commit from its
    # snapshot's xmin and xmax, which holds only if every transaction holding a number had its
    # id before it took the number. (The version also keeps older code, which takes numbers
    # with a bare nextval, from writing to the store.)
    5: (
        # (pg_current_xact_id and pg_current_snapshot came with PostgreSQL 13.)
        "DO $$ BEGIN IF current_setting('server_version_num')::integer < 130000 THEN "
        "RAISE EXCEPTION 'the run store needs PostgreSQL 13 or newer'; END IF; END $$",
        "CREATE OR REPLACE FUNCTION trio_agents_take_numbers(counter regclass, count integer) "
        "RETURNS SETOF bigint LANGUAGE plpgsql VOLATILE AS $$ BEGIN "
        "PERFORM pg_current_xact_id(); "
        "RETURN QUERY SELECT nextval(counter) FROM generate_series(1, count); "
        "END $$",
    ),
    # The database announces every change other processes must hear of, in the transaction
    # that makes it (delivered as it commits): a job admitted or purged, a job whose status or
    # cancel changed -- except a job being taken (queued to running), which nobody waits for --
    # and a journal that grew ("~" and the job's id). No statement of the writer's own: a write
    # that is one statement is a transaction on its own. The payload is "<sender> <id>", the
    # sender being the writing connection's ``trio_agents.sender`` setting ("-" for anyone
    # else's: a change made by hand is heard too); the channel is the schema's
    # (actors.durable._postgres_store.channel).
    6: (
        "CREATE OR REPLACE FUNCTION trio_agents_announce() RETURNS trigger LANGUAGE plpgsql "
        "AS $$ DECLARE channel text := 'trio_agents_' || TG_TABLE_SCHEMA; id text; BEGIN "
        "IF length(channel) > 63 THEN channel := 'trio_agents_' || "
        "left(encode(sha256(convert_to(TG_TABLE_SCHEMA, 'UTF8')), 'hex'), 32); END IF; "
        f"IF TG_TABLE_NAME = '{JOURNAL}' THEN id := '~' || NEW.job; "
        "ELSIF TG_OP = 'DELETE' THEN id := OLD.id; "
        "ELSIF TG_OP = 'INSERT' THEN id := NEW.id; "
        "ELSIF (NEW.status IS DISTINCT FROM OLD.status "
        "AND NOT (OLD.status = 'queued' AND NEW.status = 'running')) "
        "OR NEW.cancel IS DISTINCT FROM OLD.cancel THEN id := NEW.id; "
        "ELSE RETURN NULL; END IF; "
        "PERFORM pg_notify(channel, coalesce(nullif(current_setting('trio_agents.sender', true), "
        "''), '-') || ' ' || id); RETURN NULL; END $$",
        # (Made afresh: PostgreSQL 13 has no CREATE OR REPLACE TRIGGER.)
        f"DROP TRIGGER IF EXISTS trio_agents_announce ON {JOBS}",
        f"CREATE TRIGGER trio_agents_announce AFTER INSERT OR UPDATE OR DELETE ON {JOBS} "
        "FOR EACH ROW EXECUTE FUNCTION trio_agents_announce()",
        f"DROP TRIGGER IF EXISTS trio_agents_announce ON {JOURNAL}",
        f"CREATE TRIGGER trio_agents_announce AFTER INSERT ON {JOURNAL} "
        "FOR EACH ROW EXECUTE FUNCTION trio_agents_announce()",
    ),
}

#: A schema name: letters, digits and underscores, not starting with a digit.
_SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

#: How often a connection cut while the store is being prepared on it is made again, and the
#: pause before the next attempt (seconds, times the attempt's number).
_PREPARE_ATTEMPTS: Final = 3
_PREPARE_PAUSE: Final = 0.05
#: Key 1 of the advisory lock migrations hold (any constant of our own).
_MIGRATION_LOCK: Final = 7_100_423_915


def redacted(url: str) -> str:
    """``url`` without its password (what errors and logs show): the user's password -- up to
    the last ``@``, so one with an unescaped ``@``, ``/`` or ``?`` is hidden whole -- and the
    value of a ``password`` (or ``sslpassword``) parameter."""
    url = re.sub(r"^([^:/?#]+://[^:@/?#]*):.*@", r"\1:***@", url, flags=re.DOTALL)
    return re.sub(r"([?&][^=&#]*password=)[^&#]*", r"\1***", url, flags=re.IGNORECASE)


def split_url(url: str, default_schema: str = "public") -> tuple[str, str]:
    """The connection URL and the schema of a store URL: its ``schema`` parameter, taken out
    (it is ours, not the driver's). Raises :class:`~protocols.errors.ConfigError` for two."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    schemas = [value for name, value in query if name == "schema"]
    if len(schemas) > 1:
        raise ConfigError(f"the store URL {redacted(url)!r} names more than one schema")
    rest = urllib.parse.urlencode([(name, value) for name, value in query if name != "schema"])
    joined = urllib.parse.urlunsplit(parts._replace(query=rest))
    if not parts.netloc and url.startswith(f"{parts.scheme}://"):
        # urlunsplit drops the empty authority: postgresql:///db (a local socket) must stay so.
        joined = f"{parts.scheme}://{joined[len(parts.scheme) + 1 :]}"
    return joined, (schemas or [default_schema])[0]


def check_url(url: object) -> str:
    """Refuse, before connecting, what is not a PostgreSQL URL."""
    if not isinstance(url, str) or not re.match(r"postgres(ql)?://", url):
        shown = redacted(url) if isinstance(url, str) else type(url).__name__
        raise ValidationError(f"a PostgreSQL store needs a postgresql:// URL, not {shown!r}")
    return url


def _psycopg() -> Any:
    try:
        import psycopg  # noqa: PLC0415 - an optional dependency, imported when used
    except ImportError:
        raise StoreError(
            "the PostgreSQL store needs psycopg 3: pip install 'trio-agents[postgres]'",
            code="unsupported",
            category=Category.USER,
        ) from None
    return psycopg


def _line(exc: Exception) -> str:
    """The first line of what the driver said (the rest are hints)."""
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def translate_error(exc: Exception, action: str) -> StoreError:
    """The :class:`StoreError` a psycopg error while doing ``action`` is reported as: ``busy``
    (a lock or deadlock; retryable), ``io`` (the connection or the server; retryable), or
    ``io`` for anything else."""
    psycopg = _psycopg()
    errors = psycopg.errors
    text = _line(exc)
    busy = (
        errors.LockNotAvailable,
        errors.DeadlockDetected,
        errors.SerializationFailure,
        errors.QueryCanceled,
    )
    if isinstance(exc, busy):
        return StoreError(f"{action}: {text}", code="busy", retryable=True)
    # The server ended the session: the connection is gone, and a new one will do (these
    # two are no OperationalError to the driver: a session left idle in a transaction past
    # the store's stall_timeout, or a transaction past the server's transaction_timeout).
    ended = tuple(
        getattr(errors, name)
        for name in ("IdleInTransactionSessionTimeout", "TransactionTimeout")
        if hasattr(errors, name)
    )
    if isinstance(exc, (psycopg.OperationalError, *ended)):
        return StoreError(
            f"{action}: the database could not be reached or went away ({text})",
            code="io",
            retryable=True,
        )
    return StoreError(f"{action}: {text}", code="io")


def _connect(psycopg: Any, url: str, where: str) -> Any:
    """An autocommit connection to ``url`` (named ``where`` in errors)."""
    try:
        return psycopg.connect(url, autocommit=True)
    except psycopg.OperationalError as exc:  # refused, no such host, database or role, ...
        raise StoreError(
            f"cannot connect to {where}: {_line(exc)}", code="io", retryable=True
        ) from None
    except psycopg.Error as exc:
        raise translate_error(exc, f"connecting to {where}") from None


def stored_version(url: str, schema: str) -> int:
    """The schema version of the store at ``url`` in ``schema`` as it is (0: none of our
    tables yet), read without changing anything."""
    psycopg = _psycopg()
    where = redacted(url)
    try:
        with _connect(psycopg, url, where) as conn:
            row = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".{_META}',)).fetchone()
            if row is None or row[0] is None:
                return 0
            found = conn.execute(
                f'SELECT value FROM "{schema}".{_META} WHERE key = %s', ("schema_version",)
            ).fetchone()
    except psycopg.Error as exc:
        raise translate_error(exc, f"reading the schema version at {where}") from None
    text = str(found[0]) if found is not None else ""
    return int(text) if text.isdecimal() else 0


def connect(
    url: str,
    schema: str,
    *,
    migrate: bool = True,
    create: bool = True,
    sender: str | None = None,
    stall_timeout: float = STALL_TIMEOUT,
) -> Any:
    """A connection to the store at ``url`` in ``schema`` (created if missing), autocommit, its
    schema made current (``migrate=False``: a second connection, once one has migrated it).
    ``create=False`` creates nothing: no store in ``schema`` is a :class:`StoreError`
    ``code="missing"``. ``sender``: who the changes it writes are announced as (the store's
    own listener skips them). ``stall_timeout``: seconds a transaction begun on it may wait on
    this process between statements before the server ends it and the connection (PostgreSQL's
    ``idle_in_transaction_session_timeout``), releasing its locks (0: never)."""
    psycopg = _psycopg()
    if not _SCHEMA.fullmatch(schema):
        raise ValidationError(
            f"schema must be a plain SQL name (letters, digits, _), not {schema!r}"
        )
    where = redacted(url)
    attempt = 1
    while True:
        conn = _connect(psycopg, url, where)
        try:
            if migrate and not create:
                found = conn.execute("SELECT to_regclass(%s)", (f'"{schema}".{_META}',)).fetchone()
                if found is None or found[0] is None:
                    raise StoreError(
                        f"there is no store at {where} in schema {schema} (none of its tables)",
                        code="missing",
                        category=Category.USER,
                    )
            elif migrate:
                conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
            conn.execute(f'SET search_path TO "{schema}"')
            settings = {}
            if sender is not None:
                settings["trio_agents.sender"] = sender
            if stall_timeout:
                settings["idle_in_transaction_session_timeout"] = (
                    f"{max(1, round(stall_timeout * 1000))}ms"
                )
            if settings:  # (one round trip for all of them)
                conn.execute(
                    "SELECT " + ", ".join("set_config(%s, %s, false)" for _ in settings),
                    [part for pair in settings.items() for part in pair],
                )
            if migrate:
                _migrate(conn, where)
        except psycopg.Error as exc:
            # Cut after it was made (the server ended it: an operator, a failover, a test's
            # pg_terminate_backend): made again, a few times, as a running store reconnects.
            # A server that refuses to connect is not retried here (_connect raised).
            cut = conn.broken
            conn.close()
            if cut and attempt < _PREPARE_ATTEMPTS:
                time.sleep(_PREPARE_PAUSE * attempt)  # (a store's own thread: never trio's)
                attempt += 1
                continue
            raise translate_error(exc, f"preparing the store at {where}") from None
        except BaseException:
            conn.close()
            raise
        return conn


def _migrate(conn: Any, where: str) -> None:
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        row = conn.execute("SELECT to_regclass(%s)", (_META,)).fetchone()
        version = 0
        if row is not None and row[0] is not None:
            found = conn.execute(
                f"SELECT value FROM {_META} WHERE key = 'schema_version'"
            ).fetchone()
            text = str(found[0]) if found is not None else ""
            if not text.isdecimal():
                raise StoreError(
                    f"the store at {where} has no readable schema version: a partial schema, "
                    "refused",
                    code="schema",
                )
            version = int(text)
            if version > POSTGRES_SCHEMA_VERSION:
                raise StoreError(
                    f"the store at {where} has schema version {version}, newer than this "
                    f"trio-agents supports ({POSTGRES_SCHEMA_VERSION}); upgrade trio-agents",
                    code="schema",
                )
        for target in range(version + 1, POSTGRES_SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[target]:
                conn.execute(statement)
        if version < POSTGRES_SCHEMA_VERSION:
            conn.execute(
                f"INSERT INTO {_META} (key, value) VALUES ('schema_version', %s) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(POSTGRES_SCHEMA_VERSION),),
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
