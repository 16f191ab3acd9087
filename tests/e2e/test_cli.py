"""The ``trio-agents`` command line."""

from __future__ import annotations

import io
import os
import pathlib
import select
import signal
import subprocess
import sys
import sysconfig
from collections.abc import AsyncIterator
from importlib.metadata import version

import pytest
import trio
import trio.testing
from rich.console import Console

import actors
from actors import SQLiteConversationStore
from actors.agent import Chunk
from actors.cli import build_parser, main
from actors.cli._chat import HELP, INTERRUPTED, ChatSession, chat_session, open_chat
from actors.cli._demo import (
    BUDGET,
    CANCEL_AFTER,
    Endpoint,
    MemberProgress,
    TeamReport,
    _print_report,
    results_table,
    run_demo,
    run_team,
    team,
    tokens_text,
    total_tokens,
)
from actors.testing import FaultProviderServer, Simulator
from protocols.faults import UsageMissing
from protocols.messages import AgentResult, ProviderResult, Role, StopReason, Usage


def test_version_flag_prints_the_distribution_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"trio-agents {version('trio-agents')}"
    assert actors.__version__ == version("trio-agents")


def test_no_arguments_prints_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    assert "usage: trio-agents" in capsys.readouterr().out


def test_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--frobnicate"])
    assert exited.value.code == 2
    assert "unrecognized arguments: --frobnicate" in capsys.readouterr().err


def test_console_script_and_module_entry_points() -> None:
    # Where pip puts console scripts for this interpreter (PATH may not include it, e.g. pyenv).
    script = pathlib.Path(sysconfig.get_path("scripts")) / "trio-agents"
    assert script.is_file(), "the trio-agents console script is installed by the package"
    for command in ([str(script), "--version"], [sys.executable, "-m", "actors", "--version"]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"trio-agents {version('trio-agents')}"


def test_demo_streams_a_completion_from_the_simulator(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--interval", "0", "What is 19 + 23?"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("trio-agents demo: OpenAIChat -> simulator at http://127.0.0.1:")
    assert lines[1] == "> What is 19 + 23?"
    assert lines[2] == "[thinking] I can add these numbers myself."
    assert lines[3] == "19 + 23 = 42."
    assert lines[4].startswith("-- finish: stop; ")
    assert "\x1b[" not in out, "no colour codes when the output is not a terminal"


def test_demo_without_thinking_prints_only_the_answer(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--no-think", "--interval", "0", "Please count to 12."]) == 0
    out = capsys.readouterr().out
    assert "[thinking]" not in out
    assert "\n1 2 3 4 5 6 7 8 9 10 11 12\n" in out


async def test_demo_says_tokens_unknown_when_the_server_reports_no_usage(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Like llama-cpp-python, which ignores stream_options: a complete answer, no usage chunk.
    async with FaultProviderServer([UsageMissing(text="forty-two")]) as server:
        argv = ["demo", "--model", "m", "--base-url", server.base_url, "--api-key", "k", "hi"]
        assert await trio.to_thread.run_sync(lambda: main(argv)) == 0
    out = capsys.readouterr().out
    assert "forty-two" in out
    assert out.rstrip().endswith("-- finish: stop; tokens unknown (the server reported no usage)")
    assert " 0 " not in out.splitlines()[-1]


async def test_team_and_chat_say_unknown_when_the_model_never_reports_usage(
    tmp_path: pathlib.Path,
) -> None:
    async with Simulator(report_usage=False) as server:
        endpoint = Endpoint(model="simulator", base_url=server.openai_base_url, api_key="k")
        console, out = buffer_console()
        report = await run_team(console, agents=4, endpoint=endpoint, db=tmp_path / "t.sqlite3")
        chat, said = buffer_console()
        await chat_session(["count to 3"], chat, endpoint=endpoint)
    shown = {p.member.role: p.result for p in report.members}
    assert all(result is not None for result in shown.values())
    rows = {line.split()[0]: line for line in out.getvalue().splitlines() if line[1:7] == "agent-"}
    for name, role in (("agent-01", "add"), ("agent-02", "count"), ("agent-03", "cancel")):
        result = shown[role]
        assert result is not None
        assert result.usage is None
        assert " unknown " in rows[name], rows[name]
        assert " 0 " not in rows[name]
    # The budget charged its cut turn by estimate: shown as such.
    budget = shown["budget"]
    assert budget is not None
    assert budget.estimated
    assert budget.usage is not None
    assert f" ~{budget.usage.total} " in rows["agent-04"]
    assert f"; ~{budget.usage.total} tokens (3 run(s) unknown)" in out.getvalue()
    assert "1 2 3\n(1 turn(s), tokens unknown)\n" in said.getvalue()


def test_token_counts_are_shown_as_known_unknown_or_estimated() -> None:
    reported = ProviderResult(content="x", usage=Usage(prompt=3, completion=4))
    unreported = ProviderResult(content="x", usage=None)
    assert tokens_text(reported) == "7"
    assert tokens_text(unreported) == "unknown"
    assert tokens_text(None) == "-"

    estimated = AgentResult(usage=Usage(prompt=0, completion=40), estimated=True)
    assert tokens_text(estimated) == "~40"
    assert tokens_text(AgentResult(usage=None)) == "unknown"
    assert total_tokens([reported, reported]) == "14 tokens"
    assert total_tokens([reported, estimated]) == "~47 tokens"
    assert total_tokens([reported, unreported]) == "7 tokens (1 run(s) unknown)"
    assert total_tokens([unreported]) == "tokens unknown"
    assert total_tokens([]) == "0 tokens"


def test_the_results_table_and_summary_show_a_reply_cut_short(tmp_path: pathlib.Path) -> None:
    members = [
        MemberProgress(member, result=AgentResult("1 2 3", stop=stop, turns=1))
        for member, stop in zip(
            team(3),
            [StopReason.COMPLETE, StopReason.MAX_TOKENS, StopReason.CONTENT_FILTER],
            strict=True,
        )
    ]
    console, out = buffer_console(terminal=True)
    console.print(results_table(members))
    table = out.getvalue()
    assert "\x1b[31mmax_tokens" in table, "a cut reply is marked as a failure to finish"
    assert "\x1b[31mcontent_filter" in table
    console, out = buffer_console()
    report = TeamReport(tuple(members), None, 3, "here")
    _print_report(console, report, str(tmp_path / "x"), True)
    assert "3 agents: 1 complete, 1 max_tokens, 1 content_filter;" in out.getvalue()


@pytest.mark.parametrize("interval", ["-1", "11", "fast"])
def test_demo_refuses_a_bad_interval(interval: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--interval", interval])
    assert exited.value.code == 2
    assert "--interval" in capsys.readouterr().err


async def test_run_demo_paces_deltas_and_dims_thinking_on_a_terminal(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0.05

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    start = trio.current_time()
    result = await run_demo(out, prompt="count to 3", interval=2.0)
    assert result.content == "1 2 3"
    assert result.thinking == "The user wants me to count to 3, one number at a time."
    # Every streamed frame waits the interval: role, <think>, 12 thinking words, </think>, 3
    # numbers, the finish chunk, usage and [DONE] -- at least the 3 numbers and the thinking.
    assert trio.current_time() - start >= 2.0 * (3 + 12)
    text = out.getvalue()
    assert "\x1b[2m[thinking] The user wants me" in text
    assert "\x1b[0m\n1 2 3\x1b[0m\n-- finish: stop" in text


# -- the team demo ------------------------------------------------------------------------------


def buffer_console(*, terminal: bool = False, width: int = 120) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    console = Console(
        file=out,
        width=width,
        height=40,
        force_terminal=terminal,
        color_system="standard" if terminal else None,
        highlight=False,
    )
    return console, out


def test_team_has_every_role_in_a_fixed_order() -> None:
    members = team(7)
    assert [m.name for m in members] == [f"agent-{i:02d}" for i in range(1, 8)]
    assert [m.role for m in members] == ["add", "count", "cancel", "budget", "add", "count", "add"]
    assert members[0].prompt == "What is 19 + 23?"
    assert members[0].tools
    assert not members[1].tools
    assert members[2].cancel_after == CANCEL_AFTER
    assert members[3].budget == BUDGET
    assert len({m.prompt for m in members if m.role == "add"}) == 3, "every sum differs"
    with pytest.raises(ValueError, match="at least one agent"):
        team(0)


async def test_team_demo_ends_with_every_stop_reason_and_saves_the_conversations(
    tmp_path: pathlib.Path,
) -> None:
    console, out = buffer_console()
    db = tmp_path / "team.sqlite3"
    report = await run_team(console, agents=8, interval=0, db=db)
    assert report.ok
    assert report.stops() == {"complete": 6, "cancelled": 1, "budget": 1}
    by_role = {p.member.role: p for p in report.members}
    for progress in report.members:
        result = progress.result
        assert result is not None
        if progress.member.role == "add":
            a, b = (int(n) for n in progress.member.prompt[8:-1].split(" + "))
            assert result.content == f"The answer is {a + b}."
            assert (result.turns, result.stop) == (2, StopReason.COMPLETE)
            assert result.thinking, "the simulator thinks when asked to"
        elif progress.member.role == "count":
            assert result.content == " ".join(str(i) for i in range(1, 41))
    cancelled = by_role["cancel"].result
    assert cancelled is not None
    assert (cancelled.stop, cancelled.partial) == (StopReason.CANCELLED, True)
    numbers = cancelled.content.split()
    assert len(numbers) >= CANCEL_AFTER, "cut after the demo saw its deltas"
    assert len(numbers) < 100000, "cut mid-stream"
    assert numbers == [str(i) for i in range(1, len(numbers) + 1)], "the partial text is kept"
    budget = by_role["budget"].result
    assert budget is not None
    assert (budget.stop, budget.partial) == (StopReason.BUDGET, True)
    assert 0 < len(budget.content.split()) < 2000
    # The saved conversations: one per agent, the cancelled answer marked interrupted.
    assert (report.saved, report.db) == (8, str(db))
    async with await SQLiteConversationStore.open(db) as store:
        assert sorted(await store.list()) == sorted(p.conversation for p in report.members)
        snapshot = await store.get(by_role["cancel"].conversation)
        assert snapshot is not None
        last = snapshot.messages[-1]
        assert (last.role, last.interrupted, last.content) == (
            Role.ASSISTANT,
            True,
            cancelled.content,
        )
        first = await store.get(report.members[0].conversation)
        assert first is not None
        assert [m.role for m in first.messages] == [
            Role.USER,
            Role.ASSISTANT,
            Role.TOOL,
            Role.ASSISTANT,
        ]
    text = out.getvalue()
    assert "\x1b[" not in text, "no colour when the console is not a terminal"
    assert f"saved 8 conversation(s) to {db} (kept)" in text
    assert "8 agents: 6 complete, 1 cancelled, 1 budget;" in text
    assert "[8/8] " in text, "a line per finished agent stands in for the live view"


async def test_team_demo_shows_a_live_table_on_a_terminal(
    tmp_path: pathlib.Path, mock_clock: trio.testing.MockClock
) -> None:
    mock_clock.autojump_threshold = 0
    console, out = buffer_console(terminal=True)
    report = await run_team(console, agents=4, interval=0.2, db=tmp_path / "live.sqlite3")
    assert report.stops() == {"complete": 2, "cancelled": 1, "budget": 1}
    cancelled = report.members[2].result
    assert cancelled is not None
    # Paced deltas leave no slack: the demo's abort lands right after the deltas it saw.
    assert cancelled.content == " ".join(str(i) for i in range(1, CANCEL_AFTER + 1))
    text = out.getvalue()
    assert "agents finished" in text, "the live view was drawn"
    assert "writing" in text, "it showed an agent mid-stream"
    assert "\x1b[33mcancelled" in text, "stop reasons are coloured on a terminal"
    assert "[4/4]" not in text, "no finish lines under the live view"


async def test_team_demo_runs_against_an_openai_compatible_endpoint(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with Simulator(api_key="sk-test") as server:
        # Explicit flags...
        console, out = buffer_console()
        endpoint = Endpoint(model="simulator", base_url=server.openai_base_url, api_key="sk-test")
        report = await run_team(console, agents=4, endpoint=endpoint, db=tmp_path / "a.sqlite3")
        assert report.stops() == {"complete": 2, "cancelled": 1, "budget": 1}
        assert report.where == server.openai_base_url
        assert all(not p.result.thinking for p in report.members if p.result is not None), (
            "no reasoning is asked of a real endpoint unless --think"
        )
        assert f"OpenAIChat -> {server.openai_base_url}" in out.getvalue()
        assert "sk-test" not in out.getvalue()
        # ...or the usual environment variables.
        monkeypatch.setenv("OPENAI_BASE_URL", server.openai_base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        console, out = buffer_console()
        report = await run_team(
            console, agents=2, endpoint=Endpoint(model="simulator"), db=tmp_path / "b.sqlite3"
        )
        assert report.stops() == {"complete": 2}
        monkeypatch.setenv("OPENAI_API_KEY", "wrong")
        report = await run_team(
            console, agents=1, endpoint=Endpoint(model="simulator"), db=tmp_path / "c.sqlite3"
        )
        assert not report.ok
        assert report.stops() == {"error": 1}
        assert "error" in out.getvalue()


def test_demo_command_runs_the_team(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "demo.sqlite3"
    assert main(["demo", "--interval", "0", "--agents", "5", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("trio-agents demo: a team of 5 agent(s) -> OpenAIChat -> simulator at")
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("agent-0")]
    table = {row[0]: row for row in rows if len(row) > 3 and row[1] not in ("finished",)}
    stops = {
        name: next(w for w in row if w in {"complete", "cancelled", "budget"})
        for name, row in table.items()
    }
    assert stops == {
        "agent-01": "complete",
        "agent-02": "complete",
        "agent-03": "cancelled",
        "agent-04": "budget",
        "agent-05": "complete",
    }
    assert "The answer is 42." in out
    assert "5 agents: 3 complete, 1 cancelled, 1 budget;" in out
    assert db.is_file()


def test_demo_flags_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in [
        (["demo", "--agents", "0"], "--agents"),
        (["demo", "--base-url", "http://127.0.0.1:1/v1"], "need --model"),
        (["chat", "--api-key", "k"], "need --model"),
    ]:
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err


# -- the chat -----------------------------------------------------------------------------------


async def test_chat_answers_streams_and_keeps_commands_apart(tmp_path: pathlib.Path) -> None:
    console, out = buffer_console()
    db = tmp_path / "chat.sqlite3"
    lines = ["What is 19 + 23?", "", "count to 5", "/save", "/help", "/nope", "/reset", "hello"]
    script = [*lines, "/save", "/quit", "never asked"]
    session = await chat_session(script, console, interval=0, db=db)
    assert [r.content for r in session.results] == [
        "The answer is 42.",
        "1 2 3 4 5",
        "You said: hello",
    ]
    assert session.quit
    text = out.getvalue()
    assert "-> add(a=19, b=23)\n<- add: 42\n" in text, "tool calls and results are shown"
    assert "The user wants me to count to 5, one number at a time.\n1 2 3 4 5\n" in text
    assert HELP in text
    assert "unknown command /nope (try /help)" in text
    assert "never asked" not in text, "nothing is read after /quit"
    # /save wrote the first conversation; /reset started a new one, saved apart.
    first, second = session.results[0].messages[0], session.results[2].messages[0]
    async with await SQLiteConversationStore.open(db) as store:
        saved = {}
        for conversation_id in await store.list():
            snapshot = await store.get(conversation_id)
            assert snapshot is not None
            saved[snapshot.messages[0].id] = (conversation_id, snapshot.messages)
    assert set(saved) == {first.id, second.id}
    before, after = saved[first.id], saved[second.id]
    assert f"saved conversation {before[0]} (6 messages) to {db}" in text
    assert [m.content for m in before[1] if m.role is Role.USER] == [
        "What is 19 + 23?",
        "count to 5",
    ]
    assert f"saved conversation {after[0]} (2 messages) to {db}" in text
    assert [m.content for m in after[1]] == ["hello", "You said: hello"]


async def test_chat_reads_an_async_iterator_and_dims_thinking_on_a_terminal() -> None:
    console, out = buffer_console(terminal=True)

    async def typed() -> AsyncIterator[str]:
        yield "count to 3"

    session = await chat_session(typed(), console, interval=0)
    assert [r.content for r in session.results] == ["1 2 3"]
    text = out.getvalue()
    assert "\x1b[2;3m time.\x1b[0m\n1 2 3\n" in text, "thinking is dim, the answer is not"


async def test_ctrl_c_cancels_the_answer_keeps_the_partial_and_stays_in_the_chat(
    mock_clock: trio.testing.MockClock,
) -> None:
    mock_clock.autojump_threshold = 0.05
    console, out = buffer_console()
    async with open_chat(console, interval=1.0, think=False) as session:
        seen: list[str] = []

        def press_ctrl_c_after_three(chunk: Chunk) -> None:
            if chunk.kind == "content":
                seen.append(chunk.text)
                if len(seen) == 3:
                    assert session.answering
                    assert session.interrupt() is True  # what the SIGINT handler calls

        session.listeners.append(press_ctrl_c_after_three)
        assert await session.handle("count to 100")
        result = session.results[-1]
        assert (result.stop, result.partial, result.content) == (
            StopReason.CANCELLED,
            True,
            "1 2 3",
        )
        last = (await session.conversation.messages())[-1]
        assert (last.interrupted, last.content) == (True, "1 2 3")
        assert not session.answering
        assert "[cancelled: the partial answer is kept]" in out.getvalue()
        # Still in the chat: the next question is answered, with the cut one in its history.
        session.listeners.clear()
        assert await session.handle("What is 2 + 3?")
        assert session.results[-1].content == "The answer is 5."
        assert len(await session.conversation.messages()) == 6
    assert INTERRUPTED == "interrupted by Ctrl-C"


def quitting(session: ChatSession) -> bool:
    """The session's quit flag, read fresh (mypy would narrow a repeated attribute read)."""
    return session.quit


async def test_ctrl_c_at_the_prompt_twice_leaves() -> None:
    console, out = buffer_console()
    async with open_chat(console, interval=0) as session:
        assert isinstance(session, ChatSession)
        assert session.interrupt() is False
        assert not quitting(session)
        assert "Ctrl-C again" in out.getvalue()
        await session.handle("count to 2")  # typing something resets the count
        assert session.interrupt() is False
        assert not quitting(session)
        assert session.interrupt() is False
        assert quitting(session)
        assert not await session.handle("hello"), "the chat ends once quit was asked"


def test_chat_command_reads_the_terminal_until_end_of_input(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("count to 4\n"))
    assert main(["chat", "--interval", "0", "--no-think"]) == 0
    out = capsys.readouterr().out
    assert "you> 1 2 3 4\n" in out
    assert out.rstrip().endswith("bye")


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_sigint_in_the_chat_process_cancels_the_answer_only() -> None:
    chat = subprocess.Popen(
        [sys.executable, "-m", "actors", "chat", "--interval", "0.01", "--no-think"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert chat.stdin is not None
    assert chat.stdout is not None
    seen = b""

    def read_until(marker: bytes) -> None:
        nonlocal seen
        assert chat.stdout is not None
        while marker not in seen:
            ready, _, _ = select.select([chat.stdout], [], [], 60)
            assert ready, f"timed out waiting for {marker!r}; got {seen[-300:]!r}"
            data = os.read(chat.stdout.fileno(), 65536)
            assert data, f"the chat ended early: {seen[-300:]!r}"
            seen += data

    try:
        chat.stdin.write(b"count to 100000\n")
        chat.stdin.flush()
        read_until(b" 20 ")
        chat.send_signal(signal.SIGINT)
        read_until(b"[cancelled: the partial answer is kept]")
        chat.stdin.write(b"What is 2 + 3?\n/quit\n")
        chat.stdin.flush()
        rest, errors = chat.communicate(timeout=60)
    finally:
        if chat.poll() is None:
            chat.kill()
            chat.wait()
    out = (seen + rest).decode()
    assert chat.returncode == 0, errors.decode()
    partial = out.split("you> ", 2)[1].split("\n")[0].split()
    assert partial == [str(i) for i in range(1, len(partial) + 1)]
    assert 20 <= len(partial) < 100000
    assert "The answer is 5." in out
    assert out.rstrip().endswith("bye")


async def test_chat_reports_a_failed_answer_and_goes_on() -> None:
    async with Simulator(api_key="sk-right") as server:
        console, out = buffer_console()
        wrong = Endpoint(model="simulator", base_url=server.openai_base_url, api_key="sk-wrong")
        session = await chat_session(["What is 1 + 2?", "/help"], console, endpoint=wrong)
        assert session.results == []
        text = out.getvalue()
        assert "error: " in text
        assert "401" in text or "key" in text.lower()
        assert HELP in text, "the chat read the next line after the failure"
        assert "sk-wrong" not in text


def chat_command(
    argv: list[str],
    typed: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, str, str]:
    """``trio-agents chat ARGV`` with ``typed`` as its input: the status, stdout and stderr."""
    monkeypatch.setattr(sys, "stdin", io.StringIO(typed))
    status = main(["chat", "--interval", "0", "--no-think", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_chat_resume_continues_a_saved_conversation(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "chat.sqlite3")
    status, out, _ = chat_command(["--db", db], "What is 19 + 23?\n/save\n", monkeypatch, capsys)
    assert status == 0
    saved = out.split("saved conversation ", 1)[1].split()[0]
    # A new chat, the same conversation: the next question lands after the saved ones.
    status, out, err = chat_command(
        ["--db", db, "--resume", saved], "count to 3\n/save\n", monkeypatch, capsys
    )
    assert status == 0, err
    assert f"(continuing conversation {saved}: 4 messages; last asked: What is 19 + 23?)" in out
    assert f"saved conversation {saved} (6 messages) to {db}" in out

    async def read() -> list[tuple[Role, str]]:
        async with await SQLiteConversationStore.open(db) as store:
            assert await store.list() == [saved], "continued, not copied"
            snapshot = await store.get(saved)
        assert snapshot is not None
        return [(m.role, m.content) for m in snapshot.messages]

    messages = trio.run(read)
    assert [content for role, content in messages if role is Role.USER] == [
        "What is 19 + 23?",
        "count to 3",
    ]
    assert messages[-1] == (Role.ASSISTANT, "1 2 3")
    # An id that is not saved: one line, and the chat does not start.
    for argv, why in (
        (["--db", db, "--resume", "nope"], f"no conversation nope in {db}"),
        (
            ["--db", f"{db}.new", "--resume", saved],
            f"no conversation {saved} to continue: {db}.new does not exist",
        ),
    ):
        status, out, err = chat_command(argv, "hello\n", monkeypatch, capsys)
        assert status == 1
        assert err.startswith(f"trio-agents chat: {why}")
        assert err.count("\n") == 1
        assert "you>" not in out


async def test_chat_load_lists_and_continues_saved_conversations(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "chat.sqlite3"
    console, out = buffer_console(width=200)
    started: list[ChatSession] = []
    ids: list[str] = []

    async def typed() -> AsyncIterator[str]:
        yield "/load"  # nothing saved yet
        yield "/load nope"
        yield "What is 19 + 23?"
        yield "/save"
        ids.append(started[0].conversation.id)
        yield "/reset"
        yield "hello"  # a conversation never saved, left by the /load below
        yield "/load"
        yield f"/load {ids[0]}"
        yield "count to 3"
        yield "/save"
        yield f"/load {ids[0]}"  # the conversation in use, from its file: still answers
        yield "What is 2 + 3?"
        yield "/load nope"
        yield "/load a b"

    session = await chat_session(typed(), console, interval=0, db=db, on_start=started.append)
    text = out.getvalue()
    saved = ids[0]
    assert session.conversation.id == saved
    messages = await session.conversation.messages()
    assert [m.content for m in messages if m.role is Role.USER] == [
        "What is 19 + 23?",
        "count to 3",
        "What is 2 + 3?",
    ]
    assert [r.content for r in session.results] == [
        "The answer is 42.",
        "You said: hello",
        "1 2 3",
        "The answer is 5.",
    ]
    assert f"(nothing saved yet: {db} does not exist)" in text
    assert f"error: no conversation nope to continue: {db} does not exist" in text
    assert f"saved in {db}; /load ID continues one:\n  {saved}  4 messages; last asked: " in text
    assert f"(continuing conversation {saved}: 4 messages; last asked: What is 19 + 23?)" in text
    assert f"(continuing conversation {saved}: 6 messages; last asked: count to 3)" in text
    assert f"error: no conversation nope in {db} (/load in the chat lists the saved ones)" in text
    assert "error: /load takes one conversation id (/load alone lists them)" in text
    assert session.manager.count == 1, "the conversation left by /load is stopped and forgotten"
    async with await SQLiteConversationStore.open(db) as store:
        assert await store.list() == [saved]


# -- serve -------------------------------------------------------------------------------------

SERVE_TOKEN = "serve-token-for-tests-0123"


async def test_serve_runs_a_relay_with_the_page_over_the_simulator() -> None:
    import httpx

    from actors.cli._serve import run
    from actors.relay import RelayProvider
    from protocols.messages import Message

    out = io.StringIO()
    async with trio.open_nursery() as nursery:
        url: str = await nursery.start(
            lambda task_status: run(
                host="127.0.0.1",
                port=0,
                token=SERVE_TOKEN,
                origins=None,
                endpoint=None,
                interval=0,
                max_frame=1024 * 1024,
                out=out,
                shown=False,
                task_status=task_status,
            )
        )
        assert url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient() as client:
            page = await client.get(url)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in page.headers["content-security-policy"]
        socket = url.replace("http", "ws", 1) + "v1/relay"
        async with RelayProvider(socket, token=SERVE_TOKEN) as relay:
            result = await relay.generate([Message.user("What is 2 + 3?")])
        assert "5" in result.content
        nursery.cancel_scope.cancel()
    printed = out.getvalue()
    assert f"relay for the offline simulator at {url}" in printed
    assert "/v1/relay" in printed
    assert SERVE_TOKEN not in printed  # a given token is never echoed


def test_serve_refuses_a_short_token_and_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--token", "short", "--port", "0"]) == 2
    assert "at least 16 characters" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["serve", "--port", "70000"])
    assert "must be from 0 to 65535" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["serve", "--api-key", "k"])
    assert "need --model" in capsys.readouterr().err


def test_serve_passes_grace_and_allowed_hosts_on(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", "--port", "0", "--token", SERVE_TOKEN]
    assert main([*argv, "--allowed-host", "relay.example.com", "--allowed-host", "bad host"]) == 2
    assert "--allowed-host 'bad host' is not a host name" in capsys.readouterr().err
    for grace in ("-1", "nan", "soon", "3601"):
        with pytest.raises(SystemExit) as exited:
            main([*argv, "--grace", grace])
        assert exited.value.code == 2
        assert "argument --grace: " in capsys.readouterr().err
    parsed = build_parser().parse_args([*argv, "--grace", "0.5", "--allowed-host", "a.example"])
    assert (parsed.grace, parsed.allowed_hosts) == (0.5, ["a.example"])
    assert build_parser().parse_args(argv).grace == 5.0


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_serve_command_shows_a_made_up_token_once_and_stops_on_ctrl_c() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRIO_AGENTS_RELAY_TOKEN"}
    server = subprocess.Popen(
        [sys.executable, "-m", "actors", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert server.stdout is not None
    seen = b""
    try:
        while b"token (made up for this run): " not in seen or not seen.endswith(b"\n"):
            ready, _, _ = select.select([server.stdout], [], [], 60)
            assert ready, f"timed out; got {seen!r}"
            data = os.read(server.stdout.fileno(), 65536)
            assert data, f"serve ended early: {seen!r}"
            seen += data
        server.send_signal(signal.SIGINT)
        rest, errors = server.communicate(timeout=60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    out = (seen + rest).decode()
    assert server.returncode == 0, errors.decode()
    token = out.split("token (made up for this run): ", 1)[1].split()[0]
    assert len(token) >= 16
    assert out.count(token) == 1
    assert "http://127.0.0.1:" in out
    assert out.rstrip().endswith("stopped")


async def test_serve_says_plainly_when_the_port_is_taken(
    capsys: pytest.CaptureFixture[str],
) -> None:
    taken = trio.socket.socket()
    await taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        status = await trio.to_thread.run_sync(
            lambda: main(["serve", "--port", str(port), "--token", SERVE_TOKEN])
        )
    finally:
        taken.close()
    assert status == 1
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
