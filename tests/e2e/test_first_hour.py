"""What a Python developer tries in the first hour, from the docs alone, as real processes:
the simulator as a server, the offline worker recipe with ``examples/offline_app.py``, a job
from a JSON list of messages, a worker killed with SIGKILL and the next one, ``chat --relay``
and a single tool served with ``mcp --app``.

They run on the real clock (subprocesses do not follow trio's mock clock); every wait is
bounded.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import mcp
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from actors.cli._jobs import read_input_json
from actors.durable import SQLiteRunStore
from actors.providers import OpenAIChat
from protocols import Message, ProviderError, ToolCall
from protocols.codec import to_json
from protocols.errors import ConfigError

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"
TOKEN = "first-hour-relay-token-0123456789"
WITHIN = 60.0


def environment(**extra: str) -> dict[str, str]:
    """This checkout importable first (as the tests' own interpreter imports it), unbuffered."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    for name in ("TRIO_AGENTS_RELAY_TOKEN", "OPENAI_BASE_URL", "OPENAI_API_KEY", "MODEL"):
        if name not in extra:
            env.pop(name, None)
    return env


def cli(
    cwd: pathlib.Path, *args: str, stdin: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "actors", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=WITHIN,
        check=False,
        env=environment(**env),
    )


class Running:
    """A ``trio-agents`` process whose output is read as it comes."""

    def __init__(self, cwd: pathlib.Path, *args: str, **env: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "actors", *args],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environment(**env),
        )
        self.seen = b""

    @property
    def out(self) -> str:
        return self.seen.decode()

    def wait_for(self, pattern: str, timeout: float = WITHIN) -> re.Match[str]:
        """Read stdout until ``pattern`` (a regex) matches what it has printed."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while (found := re.search(pattern, self.out)) is None:
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} within {timeout} s; it printed {self.out!r}"
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if ready:
                data = os.read(self.process.stdout.fileno(), 65536)
                assert data, f"it ended before {pattern!r}: {self.out!r} {self.errors()!r}"
                self.seen += data
        return found

    def errors(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        return self.process.stderr.read().decode()

    def stop(self, signum: int = signal.SIGTERM) -> tuple[str, str]:
        """Signal it, wait for its end; what it printed, on stdout and stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signum)
        rest, errors = self.process.communicate(timeout=WITHIN)
        self.seen += rest
        return self.out, errors.decode()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=WITHIN)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None and not stream.closed:
                stream.close()


@contextmanager
def running(cwd: pathlib.Path, *args: str, **env: str) -> Iterator[Running]:
    process = Running(cwd, *args, **env)
    try:
        yield process
    finally:
        process.close()


@contextmanager
def simulator_server(cwd: pathlib.Path) -> Iterator[str]:
    """``trio-agents simulator --port 0``: its OpenAI-compatible base URL."""
    with running(cwd, "simulator", "--port", "0") as server:
        yield server.wait_for(r"--base-url (http://127\.0\.0\.1:\d+/v1)").group(1)


# -- trio-agents simulator ----------------------------------------------------------------------


def test_the_simulator_serves_until_sigterm_and_says_where(tmp_path: pathlib.Path) -> None:
    with running(tmp_path, "simulator", "--port", "0", "--api-key", "sk-local-0123") as server:
        base = server.wait_for(r"--base-url (http://127\.0\.0\.1:\d+/v1)")
        assert "requests must carry --api-key" in server.out

        async def ask(key: str) -> str:
            model = OpenAIChat(model="anything", base_url=base.group(1), api_key=key)
            try:
                return (await model.generate([Message.user("What is 2 + 3?")])).content
            except ProviderError as error:
                return error.code
            finally:
                await model.aclose()

        assert trio.run(ask, "sk-local-0123") == "2 + 3 = 5."
        assert trio.run(ask, "sk-wrong") == "auth"
        out, errors = server.stop()
    assert server.process.returncode == 0, errors
    assert out.rstrip().endswith("SIGTERM: stopped (2 requests answered)")
    # A port already taken is one line and status 1.
    with running(tmp_path, "simulator", "--port", "0") as first:
        taken = first.wait_for(r"127\.0\.0\.1:(\d+)/v1").group(1)
        second = cli(tmp_path, "simulator", "--port", taken)
    assert second.returncode == 1
    assert second.stderr.strip().startswith(
        f"trio-agents simulator: cannot listen on 127.0.0.1:{taken}:"
    )
    assert len(second.stderr.strip().splitlines()) == 1


# -- the offline recipe: a worker and MCP with examples/offline_app.py -------------------------


def test_the_offline_worker_recipe_of_the_docs(tmp_path: pathlib.Path) -> None:
    store = f"sqlite:///{tmp_path / 'jobs.db'}"
    with simulator_server(tmp_path) as base:
        model = {"OPENAI_BASE_URL": base}
        with running(
            EXAMPLES,
            "worker",
            "--store",
            store,
            "--app",
            "offline_app:registry",
            "--poll",
            "0.05",
            **model,
        ) as worker:
            worker.wait_for(r"agents: calculator;")
            submitted = cli(
                tmp_path,
                "jobs",
                "submit",
                "--store",
                store,
                "--agent",
                "calculator",
                "What is 19 + 23?",
            )
            assert submitted.returncode == 0, submitted.stderr
            job = submitted.stdout.strip()
            waited = cli(tmp_path, "jobs", "wait", "--store", store, job, "--timeout", "30")
            worker.stop()
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert waited.stdout.splitlines()[0] == f"{job}  completed  agent=calculator"
    assert "  The answer is 42." in waited.stdout.splitlines()


async def test_mcp_serves_a_single_tool_of_the_example_app() -> None:
    for name, arguments, answer in (
        ("add", {"a": 19, "b": 23}, "42"),
        ("shout", {"text": "hi"}, "HI"),
    ):
        params = mcp.StdioServerParameters(
            command=sys.executable,
            args=["-m", "actors", "mcp", "--app", f"offline_app:{name}"],
            env=environment(),
            cwd=str(EXAMPLES),
        )
        with trio.fail_after(WITHIN):
            async with mcp.Client(params) as client:
                (served,) = (await client.list_tools()).tools
                assert served.name == name
                result = await client.call_tool(name, arguments)
                assert result.content[0].text == answer


async def test_mcp_serves_the_example_agent_against_the_simulator_server(
    tmp_path: pathlib.Path,
) -> None:
    with simulator_server(tmp_path) as base:
        params = mcp.StdioServerParameters(
            command=sys.executable,
            args=["-m", "actors", "mcp", "--app", "offline_app:calculator"],
            env=environment(OPENAI_BASE_URL=base),
            cwd=str(EXAMPLES),
        )
        with trio.fail_after(WITHIN):
            async with mcp.Client(params) as client:
                (served,) = (await client.list_tools()).tools
                assert served.name == "calculator"
                result = await client.call_tool("calculator", {"prompt": "What is 19 + 23?"})
                assert result.content[0].text == "The answer is 42."


async def test_mcp_session_history_serves_an_agent_and_refuses_a_tool(
    tmp_path: pathlib.Path,
) -> None:
    # --session-history (issue 24, item 6): an agent keeps one conversation per session; it
    # means nothing for a tool, which is said in one line.
    with simulator_server(tmp_path) as base:
        params = mcp.StdioServerParameters(
            command=sys.executable,
            args=["-m", "actors", "mcp", "--app", "offline_app:calculator", "--session-history"],
            env=environment(OPENAI_BASE_URL=base),
            cwd=str(EXAMPLES),
        )
        with trio.fail_after(WITHIN):
            async with mcp.Client(params) as client:
                result = await client.call_tool("calculator", {"prompt": "What is 19 + 23?"})
                assert result.content[0].text == "The answer is 42."
    refused = cli(EXAMPLES, "mcp", "--app", "offline_app:add", "--session-history")
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "trio-agents mcp: --session-history applies to an agent; --app offline_app:add serves "
        "tools, which keep no conversation"
    )


def test_mcp_app_naming_something_else_says_what_it_may_name(tmp_path: pathlib.Path) -> None:
    (tmp_path / "odd.py").write_text("number = 7\n", encoding="utf-8")
    refused = cli(tmp_path, "mcp", "--app", "odd:number")
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        "trio-agents mcp: --app must name an Agent, a tool, a ToolRegistry or a list of tools, "
        "or a function (taking the runtime, or nothing) that returns one; it gave int"
    )


# -- jobs submit --input-json ---------------------------------------------------------------------

APP = """
import os

from actors.durable import AgentRegistry
from actors.testing import Hang, Reply, ScriptedProvider


def registry():
    agents = AgentRegistry()
    # Each call answers with what the model was given: the roles and texts, in order.
    replies = [Reply("seen") for _ in range(5)]
    agents.add("echo", ScriptedProvider(*replies))
    # HANG=1: this process's worker hangs in its model call (until it is killed).
    first = Hang("Once upon a time") if os.environ.get("HANG") else Reply("The end.")
    agents.add("story", ScriptedProvider(first, Reply("The end.")))
    return agents
"""


@pytest.fixture
def app(tmp_path: pathlib.Path) -> pathlib.Path:
    (tmp_path / "app.py").write_text(APP, encoding="utf-8")
    return tmp_path


def test_submit_takes_a_json_list_of_messages_from_a_file_or_stdin(app: pathlib.Path) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi."},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "What is 19 + 23?"},
    ]
    (app / "input.json").write_text(json.dumps(messages), encoding="utf-8")
    store = "sqlite:///jobs.db"
    by_file = cli(
        app, "jobs", "submit", "--store", store, "--agent", "echo", "--input-json", "input.json"
    )
    by_stdin = cli(
        app,
        "jobs",
        "submit",
        "--store",
        store,
        "--agent",
        "echo",
        "--input-json",
        "-",
        "--json",
        stdin=json.dumps(messages[3:]),
    )
    assert by_file.returncode == 0, by_file.stderr
    assert by_stdin.returncode == 0, by_stdin.stderr
    first, second = by_file.stdout.strip(), json.loads(by_stdin.stdout)["id"]

    async def inputs() -> list[list[tuple[str, str]]]:
        async with await SQLiteRunStore.open(str(app / "jobs.db")) as opened:
            found = []
            for id in (first, second):
                record = await opened.get(id)
                assert record is not None
                found.append([(m.role.value, m.content) for m in record.job.input])
            return found

    assert trio.run(inputs) == [
        [(m["role"], m["content"]) for m in messages],
        [("user", "What is 19 + 23?")],
    ]
    with running(
        app, "worker", "--store", store, "--app", "app:registry", "--poll", "0.05"
    ) as worker:
        worker.wait_for("Ctrl-C or SIGTERM to stop")
        waited = cli(app, "jobs", "wait", "--store", store, first, "--timeout", "30")
        worker.stop()
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert "  seen" in waited.stdout.splitlines()


@pytest.mark.parametrize(
    ("given", "told"),
    [
        ("{", "--input-json -: not valid JSON: "),
        ("[]", '--input-json -: must be a non-empty JSON list of messages, such as [{"role": '),
        ('{"role": "user", "content": "hi"}', "--input-json -: must be a non-empty JSON list"),
        ('["hi"]', "--input-json -: message 1 is not a JSON object"),
        (
            '[{"role": "user", "text": "hi"}]',
            "--input-json -: message 1: invalid Message: $: unknown field(s) 'text'",
        ),
        (
            '[{"role": "robot", "content": "x"}]',
            "--input-json -: message 1: invalid Message: $.role: 'robot'",
        ),
    ],
)
def test_submit_refuses_input_that_is_not_a_list_of_messages_in_one_line(
    app: pathlib.Path, given: str, told: str
) -> None:
    refused = cli(
        app,
        "jobs",
        "submit",
        "--store",
        "sqlite:///jobs.db",
        "--agent",
        "echo",
        "--input-json",
        "-",
        stdin=given,
    )
    assert refused.returncode == 1
    assert refused.stderr.startswith(f"trio-agents jobs: {told}"), refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert not (app / "jobs.db").exists()  # refused before any store was made


def test_submit_takes_text_or_input_json_and_a_missing_file_is_one_line(app: pathlib.Path) -> None:
    store = ("--store", "sqlite:///jobs.db", "--agent", "echo")
    for extra in ((), ("hi", "--input-json", "input.json")):
        usage = cli(app, "jobs", "submit", *store, *extra)
        assert usage.returncode == 2
        assert "jobs submit takes the user message TEXT or --input-json FILE" in usage.stderr
    missing = cli(app, "jobs", "submit", *store, "--input-json", "nowhere.json")
    assert missing.returncode == 1
    assert (
        missing.stderr.strip()
        == "trio-agents jobs: --input-json nowhere.json: No such file or directory"
    )


# -- a worker killed with SIGKILL, and the next one ------------------------------------------------


def show(app: pathlib.Path, job: str) -> tuple[str, dict[str, object]]:
    text = cli(app, "jobs", "show", "--store", "sqlite:///jobs.db", job)
    as_json = cli(app, "jobs", "show", "--store", "sqlite:///jobs.db", job, "--json")
    assert text.returncode == 0, text.stderr
    assert as_json.returncode == 0, as_json.stderr
    return text.stdout, json.loads(as_json.stdout)


def submit_and_hang(app: pathlib.Path, lease: str) -> tuple[str, str]:
    """A worker with ``--lease`` takes a job whose model call hangs, and is killed with
    SIGKILL while it holds the job: the job's id and the dead worker's name."""
    store = "sqlite:///jobs.db"
    submitted = cli(app, "jobs", "submit", "--store", store, "--agent", "story", "Tell me one.")
    job = submitted.stdout.strip()
    with running(
        app,
        "worker",
        "--store",
        store,
        "--app",
        "app:registry",
        "--lease",
        lease,
        "--poll",
        "0.05",
        HANG="1",
    ) as worker:
        owner = worker.wait_for(r"trio-agents worker: (worker-\w+) on").group(1)
        deadline = time.monotonic() + WITHIN
        while show(app, job)[1]["status"] != "running":
            assert time.monotonic() < deadline, "the worker never took the job"
            time.sleep(0.05)
        worker.process.send_signal(signal.SIGKILL)
        worker.process.wait(timeout=WITHIN)
    return job, owner


def test_a_restarted_worker_says_it_waits_for_the_dead_workers_lease(app: pathlib.Path) -> None:
    job, dead = submit_and_hang(app, lease="8")
    with running(
        app, "worker", "--store", "sqlite:///jobs.db", "--app", "app:registry", "--poll", "0.05"
    ) as worker:
        said = worker.wait_for(
            r"trio-agents worker: waiting for 1 job whose lease has not yet expired \(until "
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(in \d+ s\)\): another worker holds it; if it "
            r"stopped \(killed, crashed\), it is taken over then\n"
        )
        text, record = show(app, job)
        assert record["status"] == "running"
        lease = record["lease"]
        assert isinstance(lease, dict)
        assert lease["owner"] == dead
        assert lease["expired"] is False
        assert f"  held by {dead}, lease until " in text
        assert ": renewed while that worker runs; if it stopped, taken over then" in text
        waited = cli(app, "jobs", "wait", "--store", "sqlite:///jobs.db", job, "--timeout", "40")
        out, _ = worker.stop()
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert "  attempts 1, takeovers 1" in waited.stdout
    assert "  The end." in waited.stdout
    assert out.count("waiting for") == 1, out  # once, not at every look for jobs
    assert said.group(0) in out


def test_show_says_a_job_is_held_by_a_worker_that_stopped_renewing(app: pathlib.Path) -> None:
    job, dead = submit_and_hang(app, lease="1")
    deadline = time.monotonic() + WITHIN
    while "stopped renewing" not in (text := show(app, job)[0]):
        assert time.monotonic() < deadline, text
        time.sleep(0.1)
    record = show(app, job)[1]
    assert record["status"] == "running"
    assert record["lease"] == {"owner": dead, "until": record["lease"]["until"], "expired": True}  # type: ignore[index]
    assert re.search(
        rf"  held by a worker that stopped renewing \({dead}, lease expired "
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(\d+ s ago\)\); taken over when a worker next looks "
        r"for jobs\n",
        text,
    ), text
    # No worker is waiting for it now: the next one to start takes it over at once.
    with running(
        app, "worker", "--store", "sqlite:///jobs.db", "--app", "app:registry", "--poll", "0.05"
    ) as worker:
        waited = cli(app, "jobs", "wait", "--store", "sqlite:///jobs.db", job, "--timeout", "30")
        out, _ = worker.stop()
    assert "waiting for" not in out
    assert "  attempts 1, takeovers 1" in waited.stdout
    assert "held by" not in waited.stdout  # ended: nobody holds it


# -- chat --relay ---------------------------------------------------------------------------------


@contextmanager
def relay(cwd: pathlib.Path) -> Iterator[str]:
    """``trio-agents serve`` (the simulator behind it): the page's address it prints."""
    with running(cwd, "serve", "--port", "0", "--token", TOKEN, "--interval", "0") as server:
        yield server.wait_for(r"at (http://127\.0\.0\.1:\d+/)").group(1)


def test_chat_through_a_relay_with_its_token(tmp_path: pathlib.Path) -> None:
    with relay(tmp_path) as page:
        websocket = page.replace("http", "ws", 1) + "v1/relay"
        by_page = cli(
            tmp_path, "chat", "--relay", page, "--token", TOKEN, stdin="What is 19 + 23?\n/quit\n"
        )
        by_env = cli(
            tmp_path,
            "chat",
            "--relay",
            websocket,
            stdin="count to 3\n",
            TRIO_AGENTS_RELAY_TOKEN=TOKEN,
        )
    assert by_page.returncode == 0, by_page.stderr
    assert f"trio-agents chat -> relay at {websocket}." in by_page.stdout
    assert "-> add(a=19, b=23)" in by_page.stdout  # the tool ran here, in the chat's process
    assert "The answer is 42." in by_page.stdout
    assert by_env.returncode == 0, by_env.stderr
    assert "1 2 3" in by_env.stdout
    assert TOKEN not in by_page.stdout + by_page.stderr + by_env.stdout + by_env.stderr


def test_chat_through_a_relay_fails_in_one_line_when_it_cannot(tmp_path: pathlib.Path) -> None:
    with relay(tmp_path) as page:
        websocket = page.replace("http", "ws", 1) + "v1/relay"
        wrong_token = cli(tmp_path, "chat", "--relay", page, "--token", "not-the-token-0000000")
        wrong_path = cli(tmp_path, "chat", "--relay", page + "v2/nothing", "--token", TOKEN)
    nobody = cli(tmp_path, "chat", "--relay", websocket, "--token", TOKEN)  # the relay has stopped
    for failed in (wrong_token, wrong_path, nobody):
        assert failed.returncode == 1
        assert len(failed.stderr.strip().splitlines()) == 1, failed.stderr
        assert "not-the-token" not in failed.stderr
    assert wrong_token.stderr.strip() == (
        f"trio-agents chat: the relay at {websocket} refused the token (--token or "
        "$TRIO_AGENTS_RELAY_TOKEN)"
    )
    assert wrong_path.stderr.startswith(
        f"trio-agents chat: the relay at {websocket[: -len('v1/relay')]}v2/nothing refused the "
        "connection (HTTP 404): is it a relay's websocket"
    )
    assert (
        nobody.stderr.strip()
        == f"trio-agents chat: cannot reach the relay at {websocket}: is it running?"
    )


@pytest.mark.parametrize(
    ("argv", "told"),
    [
        (["--relay", "ws://127.0.0.1:1/v1/relay", "--model", "m"], "--model does not apply"),
        (["--token", TOKEN], "--token is the relay's: it needs --relay URL"),
        (["--relay", "ws://127.0.0.1:1/v1/relay"], "--relay needs the relay's token"),
        (["--relay", "ftp://relay.example.com"], "not a relay's URL"),
    ],
)
def test_chat_relay_usage_mistakes(tmp_path: pathlib.Path, argv: list[str], told: str) -> None:
    refused = cli(tmp_path, "chat", *argv)
    assert refused.returncode == 2
    assert told in refused.stderr


# -- --input-json, in process: every input is messages or one clear line -------------------------

TEXTS = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)
CALLS = st.builds(
    ToolCall,
    st.text("abc123", min_size=1, max_size=6),
    st.sampled_from(["add", "shout"]),
    st.dictionaries(st.sampled_from("ab"), st.integers(-5, 5), max_size=2),
)
INPUT_MESSAGES = st.one_of(
    st.builds(Message.user, TEXTS),
    st.builds(Message.system, TEXTS),
    st.builds(
        lambda text, calls: Message.assistant(text, calls=calls),
        TEXTS,
        st.lists(CALLS, max_size=2, unique_by=lambda call: call.id),
    ),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | TEXTS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXTS, inner, max_size=3),
    max_leaves=8,
)


@given(st.lists(INPUT_MESSAGES, min_size=1, max_size=5))
def test_input_json_gives_back_the_messages_it_encodes(messages: list[Message]) -> None:
    data = json.dumps([to_json(message) for message in messages]).encode()
    assert read_input_json("-", io.BytesIO(data)) == tuple(messages)


@given(st.one_of(st.binary(max_size=64), JSON.map(lambda value: json.dumps(value).encode())))
def test_input_json_is_messages_or_one_line_saying_why(data: bytes) -> None:
    refusal: ConfigError | None = None
    try:
        messages = read_input_json("-", io.BytesIO(data))
    except ConfigError as error:
        refusal = error
    if refusal is None:
        assert messages
        assert all(isinstance(message, Message) for message in messages)
    else:
        assert refusal.message.startswith("--input-json -: ")
        assert "\n" not in refusal.message


def test_input_json_larger_than_its_limit_is_refused_unread() -> None:
    from actors.cli._jobs import MAX_INPUT_JSON

    class Endless(io.RawIOBase):
        read_so_far = 0

        def readable(self) -> bool:
            return True

        def readinto(self, buffer: Any) -> int:
            self.read_so_far += len(buffer)
            buffer[:] = b" " * len(buffer)
            return len(buffer)

    source = Endless()
    with pytest.raises(ConfigError, match=rf"larger than {MAX_INPUT_JSON} bytes"):
        read_input_json("-", io.BufferedReader(source))
    assert source.read_so_far <= MAX_INPUT_JSON + 2 * io.DEFAULT_BUFFER_SIZE
