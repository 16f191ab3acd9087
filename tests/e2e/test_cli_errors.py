"""The command line's errors: a user mistake or a service that cannot be used is one clear line
on stderr and a non-zero exit, never a traceback (``--debug`` shows it). Real processes, real
loopback servers: a port that refuses connections, a server that refuses the key, a name that
does not resolve (under ``.invalid``, which never does)."""

from __future__ import annotations

import io
import logging
import os
import pathlib
import socket
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator, Iterator

import httpx
import psycopg
import pytest
import trio
from postgres_server import drop_schemas, new_schema, postgres_url
from rich.console import Console

from actors import SQLiteConversationStore
from actors.cli import describe_error, main
from actors.cli._chat import ChatError, chat_session
from actors.cli._demo import Endpoint, run_team
from actors.cli._main import _logging
from actors.durable import SQLiteRunStore, submit_job
from actors.testing import Simulator
from protocols.errors import ConfigError, ProviderError, ValidationError
from protocols.jobs import AgentJob, Applied, JobStatus, finish
from protocols.messages import Role

KEY = "sk-right-key-for-the-cli-tests"
#: A name that never resolves (RFC 6761), so no real host is ever asked.
NOWHERE = "http://no-such-model-server.invalid/v1"


@pytest.fixture
def refused() -> Iterator[str]:
    """The base URL of a loopback port that refuses connections: bound, never listening."""
    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{bound.getsockname()[1]}/v1"


def environment(**extra: str) -> dict[str, str]:
    """This environment without the variables the command line reads, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "TRIO_AGENTS_"))}
    env.update(extra)
    return env


async def trio_agents(
    *args: str, stdin: bytes = b"", env: dict[str, str] | None = None, cwd: str | None = None
) -> tuple[int, str, str]:
    """Run ``python -m actors ARGS`` (the trio loop keeps serving meanwhile): status, out, err."""
    with trio.fail_after(120):
        done = await trio.run_process(
            [sys.executable, "-m", "actors", *args],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=environment() if env is None else env,
            cwd=cwd,
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def one_line(err: str, command: str) -> str:
    """The one error line of ``err`` (after any warning lines), checked to be just that."""
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if ": warning: " not in line]
    assert len(lines) == 1, err
    assert lines[0].startswith(f"trio-agents {command}: ")
    return lines[0]


# -- an endpoint that cannot be used -----------------------------------------------------------


async def test_demo_prompt_against_a_port_that_refuses_connections(refused: str) -> None:
    status, out, err = await trio_agents("demo", "--model", "m", "--base-url", refused, "hi")
    assert status == 1
    line = one_line(err, "demo")
    assert line.startswith(f"trio-agents demo: cannot reach the model at {refused}: ")
    assert "ConnectError" in line
    assert out.startswith(f"trio-agents demo: OpenAIChat -> {refused}\n")


async def test_demo_prompt_against_a_name_that_does_not_resolve() -> None:
    status, _, err = await trio_agents("demo", "--model", "m", "--base-url", NOWHERE, "hi")
    assert status == 1
    assert one_line(err, "demo").startswith(
        f"trio-agents demo: cannot reach the model at {NOWHERE}"
    )


async def test_demo_prompt_against_a_server_that_refuses_the_key() -> None:
    async with Simulator(api_key=KEY) as server:
        base = server.openai_base_url
        status, _, err = await trio_agents(
            "demo", "--model", "simulator", "--base-url", base, "--api-key", "sk-wrong-key", "hi"
        )
    assert status == 1
    line = one_line(err, "demo")
    assert line.startswith(f"trio-agents demo: the model at {base} refused the API key ")
    assert "401" in line
    assert "sk-wrong-key" not in err


async def test_debug_shows_the_traceback_instead(refused: str) -> None:
    for flags in (["--debug", "demo"], ["demo", "--debug"]):
        status, _, err = await trio_agents(*flags, "--model", "m", "--base-url", refused, "hi")
        assert status == 1
        assert "Traceback (most recent call last)" in err
        assert "ProviderError" in err


async def test_a_setting_the_provider_refuses_is_one_line() -> None:
    # $OPENAI_BASE_URL is not checked by the parser: the provider's ConfigError says it.
    env = environment(OPENAI_BASE_URL="ftp://example.invalid/v1", OPENAI_API_KEY="k")
    status, _, err = await trio_agents("demo", "--model", "m", "hi", env=env)
    assert status == 1
    line = one_line(err, "demo")
    assert "base_url must be an http(s) URL" in line
    assert "ConfigError" not in line


@pytest.mark.parametrize("url", ["localhost:8080/v1", "ftp://host/v1", "http:///v1", "http://[::1"])
def test_a_base_url_that_is_not_an_http_url_is_a_usage_error(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--model", "m", "--base-url", url, "hi"])
    assert exited.value.code == 2
    assert "argument --base-url: not " in capsys.readouterr().err


def test_db_with_a_single_prompt_is_a_usage_error_not_ignored(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--db", "kept.sqlite3", "hi"])
    assert exited.value.code == 2
    assert "--db saves the team demo's conversations" in capsys.readouterr().err


def test_the_team_says_why_its_runs_failed(
    refused: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["demo", "--agents", "3", "--model", "m", "--base-url", refused, "--api-key", "k"]
    assert main(argv) == 1
    captured = capsys.readouterr()
    # One line on stderr: how many failed, and why.
    line = one_line(captured.err, "demo")
    why = f"cannot reach the model at {refused}: openai-chat: ConnectError: "
    assert line.startswith(f"trio-agents demo: 3 of 3 run(s) failed: {why}")
    # The progress lines say why too (the output is not a terminal here).
    progress = [line for line in captured.out.splitlines() if line.startswith("[")]
    assert len(progress) == 3
    assert all(f"error: {why}" in line for line in progress)
    # The table shows the whole message, wrapped in its answer column -- not an elided class.
    assert "ProviderError" not in captured.out
    lines = captured.out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["agent", "task"])
    column = lines[header].index("answer")
    rows = lines[
        header + 2 : next(i for i in range(header + 2, len(lines)) if not lines[i].strip())
    ]
    answers = "".join(row[column:] for row in rows)
    assert "…" not in answers
    message = line.split(" failed: ", 1)[1]
    assert "".join(message.split()) * 3 == "".join(answers.split())
    assert "3 agents: 3 error;" in captured.out


async def test_the_team_table_wraps_a_long_error_on_a_narrow_terminal() -> None:
    async with Simulator(api_key=KEY) as server:
        out = io.StringIO()
        console = Console(file=out, width=72, force_terminal=False, highlight=False)
        wrong = Endpoint(model="simulator", base_url=server.openai_base_url, api_key="sk-nope")
        report = await run_team(console, agents=1, endpoint=wrong, live=False)
        base = server.openai_base_url
    assert report.stops() == {"error": 1}
    error = report.members[0].error
    assert error is not None
    assert error.startswith(f"the model at {base} refused the API key")
    table = out.getvalue().split("Results", 1)[1].split("1 agents:", 1)[0]
    assert all(len(line) <= 72 for line in table.splitlines())
    assert "agent-01" in table, "the other columns are kept"
    assert "".join(error.split()) in "".join(table.split())


# -- the store ----------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["demo", "chat"])
async def test_db_in_a_folder_that_does_not_exist(command: str, tmp_path: pathlib.Path) -> None:
    db = tmp_path / "missing" / "store.sqlite3"
    status, _, err = await trio_agents(command, "--interval", "0", "--db", str(db))
    assert status == 1
    line = one_line(err, command)
    assert str(db) in line
    assert "does not exist" in line or "No such file or directory" in line
    assert not db.parent.exists()


@pytest.mark.parametrize("command", ["demo", "chat"])
async def test_db_file_other_users_can_read(command: str, tmp_path: pathlib.Path) -> None:
    db = tmp_path / "loose.sqlite3"
    async with await SQLiteConversationStore.open(db):
        pass
    db.chmod(0o644)
    status, _, err = await trio_agents(command, "--interval", "0", "--db", str(db))
    assert status == 1
    line = one_line(err, command)
    assert f"{db} is accessible to other users (mode 0644)" in line
    assert "chmod 600" in line


# -- the chat -----------------------------------------------------------------------------------


async def test_chat_says_why_an_answer_failed_in_one_line_and_goes_on(refused: str) -> None:
    status, out, err = await trio_agents(
        "chat", "--model", "m", "--base-url", refused, stdin=b"hi\n/help\n/quit\n"
    )
    assert status == 0, err
    errors = [line for line in out.splitlines() if "error: " in line]
    assert len(errors) == 1
    assert f"error: cannot reach the model at {refused}: openai-chat: ConnectError: " in errors[0]
    assert "/load ID" in out, "the help was shown after the failure"
    assert "Traceback" not in out + err


async def test_chat_with_a_name_that_does_not_resolve_goes_on() -> None:
    status, out, _ = await trio_agents(
        "chat", "--model", "m", "--base-url", NOWHERE, stdin=b"hi\n/quit\n"
    )
    assert status == 0
    assert f"error: cannot reach the model at {NOWHERE}: " in out


async def test_a_failing_save_is_shown_and_the_chat_keeps_its_conversation(
    tmp_path: pathlib.Path,
) -> None:
    db = tmp_path / "chat.sqlite3"
    out = io.StringIO()

    async def typed() -> AsyncIterator[str]:
        yield "What is 19 + 23?"
        yield "/save"
        db.chmod(0o644)  # someone loosens the file: the next save is refused
        yield "/save"
        yield "count to 3"
        db.chmod(0o600)
        yield "/save"

    session = await chat_session(typed(), Console(file=out, width=200), interval=0, db=db)
    text = out.getvalue()
    refusals = [line for line in text.splitlines() if line.startswith("error: ")]
    assert refusals == [
        f"error: {db} is accessible to other users (mode 0644); a trio-agents store must be "
        "owner-only: check who could have read it, then chmod 600 it"
    ]
    # The chat went on, with its whole conversation: the second answer saw the first.
    assert [r.content for r in session.results] == ["The answer is 42.", "1 2 3"]
    messages = await session.conversation.messages()
    assert [m.content for m in messages if m.role is Role.USER] == [
        "What is 19 + 23?",
        "count to 3",
    ]
    async with await SQLiteConversationStore.open(db) as store:
        saved = await store.get(session.conversation.id)
    assert saved is not None
    assert saved.messages == messages
    assert text.count(f"saved conversation {session.conversation.id}") == 2


async def test_warns_once_when_a_real_model_has_no_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)

    async def demo(*argv: str) -> str:  # in this process: the demo needs no terminal
        status = await trio.to_thread.run_sync(lambda: main(["demo", *argv]))
        captured = capsys.readouterr()
        assert status == 0, captured.err
        return captured.err

    async def chat(*argv: str, env: dict[str, str] | None = None) -> str:  # owns SIGINT
        status, _, err = await trio_agents("chat", *argv, stdin=b"hi\n", env=env)
        assert status == 0, err
        return err

    async with Simulator() as server:
        base = server.openai_base_url
        model = ["--model", "simulator", "--base-url", base]
        for command, run in (("demo", demo), ("chat", chat)):
            argv = [*model, "What is 1 + 2?"] if command == "demo" else model
            assert (await run(*argv)).splitlines() == [
                f"trio-agents {command}: warning: no API key for {base} (--api-key or "
                "$OPENAI_API_KEY); fine for a local server that needs none"
            ]
            assert await run(*argv, "--api-key", "k") == ""
        monkeypatch.setenv("OPENAI_API_KEY", "k")
        assert await demo(*model, "hi") == ""
        assert await chat(*model, env=environment(OPENAI_API_KEY="k")) == ""
        monkeypatch.delenv("OPENAI_API_KEY")
        # serve warns too (here before it refuses an option, so it does not start).
        argv = ["serve", *model, "--token", "t" * 20, "--allowed-host", "bad host"]
        assert main(argv) == 2
        assert capsys.readouterr().err.splitlines()[0] == (
            f"trio-agents serve: warning: no API key for {base} (--api-key or "
            "$OPENAI_API_KEY); fine for a local server that needs none"
        )
        # The simulator needs no key and gets no warning.
        assert await demo("--interval", "0", "hi") == ""


# -- how errors are told -----------------------------------------------------------------------


def test_describe_error_knows_user_errors_and_leaves_bugs_alone() -> None:
    refused = ProviderError("openai-chat: ConnectError: refused", code="transport")
    assert describe_error(refused, "http://h/v1") == (
        "cannot reach the model at http://h/v1: openai-chat: ConnectError: refused"
    )
    assert describe_error(refused) == "cannot reach the model: openai-chat: ConnectError: refused"
    key = ProviderError("openai-chat error: 401 - bad key", code="auth", status=401)
    assert describe_error(key, "http://h/v1") == (
        "the model at http://h/v1 refused the API key (--api-key or $OPENAI_API_KEY): "
        "openai-chat error: 401 - bad key"
    )
    assert describe_error(ConfigError("think is not\nsupported")) == "think is not supported"
    assert describe_error(FileNotFoundError(2, "No such file or directory", "/x")) == (
        "/x: No such file or directory"
    )
    # Grouped, as trio's nurseries raise them: the first, and how many others differ.
    group = ExceptionGroup("g", [ExceptionGroup("h", [refused]), refused, ChatError("other")])
    assert describe_error(group, "http://h/v1") == (
        "cannot reach the model at http://h/v1: openai-chat: ConnectError: refused "
        "(and 1 other error(s))"
    )
    # A bug is not a user's mistake: its traceback should be seen.
    for bug in (KeyError("x"), ExceptionGroup("g", [refused, TypeError("bug")]), RuntimeError()):
        assert describe_error(bug) is None
    assert describe_error(ValidationError("bad")) == "bad"
    invalid = httpx.InvalidURL("Invalid port: ':1'")
    assert describe_error(invalid) == "invalid URL: Invalid port: ':1'"
    assert describe_error(invalid, "http://[::1/v1") == (
        "invalid URL http://[::1/v1: Invalid port: ':1'"
    )


def test_library_warnings_are_one_line_and_debug_shows_everything() -> None:
    logger = logging.getLogger("trio_agents.test")
    handlers = list(logging.getLogger("trio_agents").handlers)

    def log(debug: bool) -> str:
        stream = io.StringIO()
        with _logging(debug, stream):
            try:
                raise RuntimeError("inner")
            except RuntimeError:
                logger.warning("a tool failed:\n  twice", exc_info=True)
            logger.debug("details")
        logger.warning("after: not shown")
        return stream.getvalue()

    assert log(False) == "trio-agents: warning: trio_agents.test: a tool failed: twice\n"
    shown = log(True)
    assert "Traceback (most recent call last)" in shown
    assert "RuntimeError: inner" in shown
    assert "details" in shown
    assert "after" not in shown
    assert logging.getLogger("trio_agents").handlers == handlers, "put back as it was"


# -- every command, the mistakes a new user makes ------------------------------------------------

#: Modules an ``--app`` may name, each failing its own way (and one that works).
APPS = {
    "boom.py": 'raise RuntimeError("boom at import")\n',
    "broken.py": "def registry(:\n    pass\n",
    "needy.py": "import no_such_dependency_anywhere\n",
    "raising.py": (
        "def registry():\n"
        "    settings = {}\n"
        '    return settings["MODEL"]\n'
        "\n"
        "\n"
        "async def later(runtime):\n"
        '    raise RuntimeError("no model configured")\n'
    ),
    "exiting.py": 'import sys\n\nsys.exit("no config")\n',
    "fine.py": (
        "from actors import tool\n"
        "from actors.durable import AgentRegistry\n"
        "\n"
        "\n"
        "@tool\n"
        "async def add(a: int, b: int) -> int:\n"
        '    """Add."""\n'
        "    return a + b\n"
        "\n"
        "\n"
        "tools = [add]\n"
        "\n"
        "\n"
        "class Odd(AgentRegistry):\n"
        "    def __iter__(self):\n"
        '        raise RuntimeError("a bug of its own")\n'
        "\n"
        "\n"
        "odd = Odd()\n"
    ),
}
SECRET = "s3cret-pw"


def _postgres(*, database: str | None = None, schema: str | None = None) -> str:
    """The tests' PostgreSQL URL with a password, another database or a schema (which it
    never creates)."""
    parts = urllib.parse.urlsplit(postgres_url())
    user = (parts.username or "postgres") + f":{SECRET}"
    netloc = f"{user}@{parts.netloc.rpartition('@')[2]}"
    query = parts.query + (f"&schema={schema}" if schema else "") if parts.query else ""
    if schema and not parts.query:
        query = f"schema={schema}"
    path = f"/{database}" if database else parts.path
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, path=path, query=query))


async def _store(folder: pathlib.Path) -> dict[str, str]:
    """A store with a job that waits (queued) and one that ended (failed); their ids."""
    async with await SQLiteRunStore.open(folder / "jobs.db") as store:
        first, _ = await submit_job(store, AgentJob.ask("calculator", "hi"))
        waiting, _ = await submit_job(store, AgentJob.ask("calculator", "hi"))
        taken = await store.acquire(owner="w", lease=30)
        assert taken is not None
        assert taken.id == first.id
        assert taken.lease is not None
        done = finish(taken, taken.lease, now=time.time(), status=JobStatus.FAILED, error="x")
        assert isinstance(done, Applied)
        assert await store.write(done)
    return {"queued": waiting.id, "ended": first.id}


def _files(folder: pathlib.Path) -> list[str]:
    return sorted(
        os.path.join(top, name) for top, dirs, files in os.walk(folder) for name in dirs + files
    )


WORKER = ("worker", "--store", "sqlite:///jobs.db", "--app")
MISSING = "there is no store at typo.db (no such file)"
MISTAKES: list[tuple[tuple[str, ...], int, str]] = [
    # A --store where there is no store: never created by what only reads or changes jobs.
    (("jobs", "show", "--store", "sqlite:///typo.db", "x"), 1, MISSING),
    (("jobs", "list", "--store", "sqlite:///typo.db"), 1, MISSING),
    (("jobs", "wait", "--store", "sqlite:///typo.db", "x", "--timeout", "1"), 1, MISSING),
    (("jobs", "cancel", "--store", "sqlite:///typo.db", "x"), 1, MISSING),
    (("jobs", "answer", "--store", "sqlite:///typo.db", "x", "c", "--allow"), 1, MISSING),
    (("jobs", "purge", "--store", "sqlite:///typo.db", "x"), 1, MISSING),
    (("jobs", "list", "--store", "sqlite:///empty.db"), 1, "holds none of its tables"),
    (("jobs", "list", "--store", "sqlite:///notes.txt"), 1, "the database file is damaged"),
    (("jobs", "submit", "--store", "sqlite:///no/jobs.db", "--agent", "a", "hi"), 1, "no/jobs"),
    (("store", "migrate", "--store", "sqlite:///no/jobs.db"), 1, "No such file or directory"),
    (("jobs", "list", "--store", "mysql://db/x"), 1, "unsupported store URL 'mysql'"),
    (("jobs", "list", "--store", "sqlite://jobs.db"), 1, "is sqlite:///PATH"),
    # PostgreSQL: unreachable, malformed, no such database or schema -- the password unshown.
    (("jobs", "list", "--store", f"postgresql://ada:{SECRET}@127.0.0.1:1/x"), 1, "refused"),
    (("jobs", "list", "--store", f"postgresql://ada:{SECRET}@[::1/x"), 1, "not a store URL"),
    (("jobs", "list", "--store", f"postgresql://ada:{SECRET}@h:x/db"), 1, "not a store URL"),
    (("jobs", "list", "--store", f"postgresql://ada:s3c/{SECRET}@h/db"), 1, "ada:***@h/db"),
    (("jobs", "list", "--store", "{pg_database}"), 1, 'database "no_such_db" does not exist'),
    (("jobs", "show", "--store", "{pg_schema}", "x"), 1, "in schema {schema} (none of its"),
    # Ids the store does not know, jobs that have ended, a wait that times out.
    (("jobs", "show", "--store", "sqlite:///jobs.db", "nope"), 1, "no job 'nope'"),
    (("jobs", "cancel", "--store", "sqlite:///jobs.db", "nope"), 1, "no job 'nope'"),
    (("jobs", "answer", "--store", "sqlite:///jobs.db", "nope", "c", "--deny"), 1, "no job"),
    (("jobs", "purge", "--store", "sqlite:///jobs.db", "nope"), 1, "no job 'nope'"),
    (("jobs", "wait", "--store", "sqlite:///jobs.db", "nope"), 1, "no job 'nope'"),
    (("jobs", "purge", "--store", "sqlite:///jobs.db", "{queued}"), 1, "is queued: not ended"),
    (
        ("jobs", "answer", "--store", "sqlite:///jobs.db", "{ended}", "c", "--allow"),
        1,
        "job {ended} has already ended (failed): nothing to answer",
    ),
    (
        ("jobs", "cancel", "--store", "sqlite:///jobs.db", "{ended}"),
        1,
        "job {ended} has already ended (failed): nothing to cancel",
    ),
    (
        ("jobs", "wait", "--store", "sqlite:///jobs.db", "{queued}", "--timeout", "0.5"),
        124,
        "job {queued} has not ended within 0.5 s (it is queued)",
    ),
    # An --app that fails, whatever it raises: the module, the error, and where.
    (
        (*WORKER, "boom:registry"),
        1,
        "--app boom:registry: importing boom failed: RuntimeError: boom at import (boom.py, "
        "line 1)",
    ),
    ((*WORKER, "broken:registry"), 1, "importing broken failed: SyntaxError: "),
    ((*WORKER, "needy:x"), 1, "ModuleNotFoundError: No module named 'no_such_dependency_any"),
    ((*WORKER, "exiting:x"), 1, "importing exiting failed: SystemExit: no config"),
    (
        (*WORKER, "raising:registry"),
        1,
        "--app raising:registry: calling registry() failed: KeyError: 'MODEL' (raising.py, line 3)",
    ),
    (
        (*WORKER, "raising:later"),
        1,
        "calling later() failed: RuntimeError: no model configured (raising.py, line 7)",
    ),
    ((*WORKER, "nowhere:registry"), 1, "cannot import 'nowhere' for --app"),
    (("mcp", "--app", "boom:tools"), 1, "--app boom:tools: importing boom failed: RuntimeErr"),
    (("mcp", "--app", "broken:tools"), 1, "--app broken:tools: importing broken failed: Synt"),
    (("mcp", "--app", "raising:registry"), 1, "calling registry() failed: KeyError: 'MODEL'"),
    (("mcp", "--app", "raising:later", "--http"), 1, "RuntimeError: no model configured (r"),
    (("mcp", "--app", "fine:tools", "--http", "--port", "{busy}"), 1, "cannot listen on 127"),
    # serve's own mistakes.
    (("serve", "--token", "short"), 2, "at least 16 characters"),
    (("serve", "--origin", "example.com"), 2, "--origin 'example.com' is not an origin"),
    (("serve", "--port", "{busy}", "--token", "t" * 20), 1, "cannot listen on 127.0.0.1:"),
]


@pytest.mark.parametrize(("args", "status", "expected"), MISTAKES)
async def test_a_mistake_is_one_line_a_documented_status_and_creates_nothing(
    tmp_path: pathlib.Path, args: tuple[str, ...], status: int, expected: str
) -> None:
    for name, text in APPS.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "empty.db").touch(mode=0o600)
    (tmp_path / "notes.txt").write_text("not a database\n", encoding="utf-8")
    (tmp_path / "notes.txt").chmod(0o600)
    ids = await _store(tmp_path)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        names = {**ids, "busy": str(busy.getsockname()[1])}
        if any("{pg_" in arg for arg in args):
            names["schema"] = new_schema()  # (dropped after, had it been made)
            names["pg_database"] = _postgres(database="no_such_db")
            names["pg_schema"] = _postgres(schema=names["schema"])
        before = _files(tmp_path)
        env = environment(PYTHONDONTWRITEBYTECODE="1")
        try:
            done, out, err = await trio_agents(
                *(arg.format(**names) for arg in args), env=env, cwd=str(tmp_path)
            )
        finally:
            if "schema" in names:
                await trio.to_thread.run_sync(drop_schemas, names["schema"])
    assert done == status, (out, err)
    line = one_line(err, args[0])
    assert expected.format(**names) in line
    assert SECRET not in out + err
    assert _files(tmp_path) == before, "a mistake creates nothing"


async def test_a_mistyped_postgresql_schema_is_not_created() -> None:
    schema = new_schema()
    for action in (("list",), ("show", "x"), ("wait", "x"), ("cancel", "x"), ("purge", "x")):
        status, _, err = await trio_agents(
            "jobs", action[0], "--store", _postgres(schema=schema), *action[1:]
        )
        assert status == 1
        assert "there is no store at " in one_line(err, "jobs")
        assert SECRET not in err

    def schemas() -> list[str]:
        with psycopg.connect(postgres_url(), autocommit=True) as conn:
            rows = conn.execute("SELECT nspname FROM pg_namespace").fetchall()
        return [name for (name,) in rows]

    try:
        assert schema not in await trio.to_thread.run_sync(schemas)
    finally:
        await trio.to_thread.run_sync(drop_schemas, schema)


@pytest.mark.parametrize("command", ["worker", "mcp"])
async def test_debug_shows_the_apps_traceback_once(command: str, tmp_path: pathlib.Path) -> None:
    (tmp_path / "raising.py").write_text(APPS["raising.py"], encoding="utf-8")
    store = ("--store", "sqlite:///jobs.db") if command == "worker" else ()
    status, _, err = await trio_agents(
        command, "--debug", *store, "--app", "raising:later", cwd=str(tmp_path)
    )
    assert status == 1
    assert err.count("Traceback (most recent call last)") == 1, err
    assert "During handling" not in err
    assert "direct cause" not in err
    assert 'raising.py", line 7, in later' in err
    assert err.rstrip().endswith("RuntimeError: no model configured")


async def test_a_bug_shows_one_traceback_not_the_runtimes_group_too(tmp_path: pathlib.Path) -> None:
    """What is not a user's mistake shows its traceback (please report it) -- once: not after
    the exception group the runtime unwrapped it from ("During handling of the above...")."""
    (tmp_path / "fine.py").write_text(APPS["fine.py"], encoding="utf-8")
    status, _, err = await trio_agents(
        "worker", "--store", "sqlite:///jobs.db", "--app", "fine:odd", cwd=str(tmp_path)
    )
    assert status == 1
    assert err.count("Traceback (most recent call last)") == 1, err
    assert "During handling" not in err
    assert "ExceptionGroup" not in err
    assert err.rstrip().endswith("RuntimeError: a bug of its own")
