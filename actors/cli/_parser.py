"""The ``trio-agents`` command line's argument parser: :func:`build_parser` and the checks of
its option values (a command's own checks of several options together are ``_main``'s)."""

from __future__ import annotations

import argparse
import urllib.parse
from collections.abc import Callable

from .._version import __version__

__all__ = ["SIMULATOR_PORT", "build_parser"]


def _seconds(low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not low <= value <= high:  # also refuses nan
            raise argparse.ArgumentTypeError(
                f"must be from {low:g} to {high:g} seconds, not {text}"
            )
        return value

    return parse


_interval = _seconds(0, 10)


def _count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, not {text}")
        return value

    return parse


def _url(text: str) -> str:
    """An http(s) URL with a host, as ``--base-url`` takes it."""
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a URL: {text!r} ({error})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"not an http(s) URL with a host: {text!r} (for example http://localhost:8080/v1)"
        )
    return text


def _relay_url(text: str) -> str:
    """A relay's websocket URL, as ``chat --relay`` takes it: ``ws(s)://HOST[:PORT]/PATH``, or
    the ``http(s)://HOST[:PORT]/`` of the relay's page (its websocket is ``/v1/relay``)."""
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"not a URL: {text!r} ({error})") from None
    schemes = {"ws": "ws", "wss": "wss", "http": "ws", "https": "wss"}
    if parts.scheme not in schemes or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"not a relay's URL: {text!r} (for example ws://127.0.0.1:8000/v1/relay)"
        )
    path = parts.path
    if parts.scheme in ("http", "https") and path in ("", "/"):
        path = "/v1/relay"  # the page's address: its websocket
    return urllib.parse.urlunsplit(
        (schemes[parts.scheme], parts.netloc, path or "/", parts.query, "")
    )


def _endpoint_options(
    parser: argparse.ArgumentParser, interval: float, *, think: bool = True
) -> None:
    model = parser.add_argument_group(
        "model",
        "By default the offline simulator answers (no network, no key). Give --model (and "
        "--base-url, or $OPENAI_BASE_URL) to talk to a real OpenAI-compatible endpoint instead.",
    )
    model.add_argument(
        "--base-url",
        type=_url,
        metavar="URL",
        help="an OpenAI-compatible endpoint ending in /v1 (default: $OPENAI_BASE_URL, else "
        "OpenAI's); needs --model",
    )
    model.add_argument("--model", help="the model to ask on the real endpoint")
    model.add_argument(
        "--api-key", metavar="KEY", help="the endpoint's API key (default: $OPENAI_API_KEY)"
    )
    model.add_argument(
        "--interval",
        type=_interval,
        default=interval,
        metavar="SECONDS",
        help="the simulator's pause between streamed deltas (default: %(default)s; 0: at once)",
    )
    if not think:
        return
    model.add_argument(
        "--think",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ask for reasoning (default: on with the simulator, off with a real endpoint, "
        "where it sends reasoning_effort)",
    )


DEBUG_HELP = (
    "show the traceback of an error (instead of one line) and the library's debug log on stderr"
)


def _debug_option(parser: argparse.ArgumentParser) -> None:
    """``--debug`` after the sub-command too (``trio-agents demo --debug``); it keeps the
    top-level value when not given here."""
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``trio-agents`` command and its sub-commands."""
    parser = argparse.ArgumentParser(
        prog="trio-agents",
        description="trio-agents: a runtime for LLM agents built on trio.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version"
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="run a supervised team of agents against the offline simulator",
        description=(
            "Start the offline model simulator on 127.0.0.1 and run a supervised team of agents "
            "concurrently over real HTTP through one provider connection: some add with a tool, "
            "some count while streaming, one is cancelled mid-stream, one runs out of its token "
            "budget. Conversations are saved to SQLite; a table of results ends it. With a "
            "PROMPT, stream one completion instead. No network or API key needed."
        ),
    )
    demo.add_argument(
        "prompt",
        nargs="?",
        default=None,
        help="stream one completion of PROMPT instead of running the team "
        "(try 'count to 40', 'What is 19 + 23?')",
    )
    demo.add_argument(
        "--agents",
        type=_count(1, 1000),
        default=20,
        metavar="N",
        help="how many agents the team has (default: %(default)s)",
    )
    demo.add_argument(
        "--concurrency",
        type=_count(1, 1000),
        default=16,
        metavar="N",
        help="model calls in flight at once through the connection (default: %(default)s)",
    )
    demo.add_argument(
        "--db",
        metavar="PATH",
        help="save the conversations to this SQLite file (default: a temporary one)",
    )
    _endpoint_options(demo, 0.05)
    _debug_option(demo)
    chat = commands.add_parser(
        "chat",
        help="chat in the terminal, with the simulator or a real endpoint",
        description=(
            "An interactive chat: answers stream as they come, thinking shown dimmed. Ctrl-C "
            "cancels the answer in progress (the partial answer is kept) and returns to the "
            "prompt. Commands: /reset, /save, /load, /help, /quit."
        ),
    )
    chat.add_argument(
        "--db",
        metavar="PATH",
        default="trio-agents-chat.sqlite3",
        help="where /save writes the conversation and /load reads (default: %(default)s)",
    )
    chat.add_argument(
        "--resume",
        metavar="ID",
        help="continue the conversation with this id, saved in --db (/load lists them)",
    )
    _endpoint_options(chat, 0.02)
    through = chat.add_argument_group(
        "relay",
        "Or chat through a relay (trio-agents serve, or any trio-agents relay): it holds the "
        "model and its key; the agent and its tool run here.",
    )
    through.add_argument(
        "--relay",
        type=_relay_url,
        metavar="URL",
        help="the relay's websocket, ws(s)://HOST:PORT/v1/relay, or the address trio-agents "
        "serve prints (http://HOST:PORT/)",
    )
    through.add_argument(
        "--token",
        metavar="TOKEN",
        help="the relay's bearer token (default: $TRIO_AGENTS_RELAY_TOKEN)",
    )
    _debug_option(chat)
    relay = commands.add_parser(
        "serve",
        help="run a relay with a browser chat page, in front of the simulator or an endpoint",
        description=(
            "Serve a relay: clients (the browser chat page at /, or a RelayProvider) drive the "
            "model through it with a bearer token and never see the model's credential. Binds "
            "127.0.0.1 unless told otherwise. The token comes from --token, else "
            "$TRIO_AGENTS_RELAY_TOKEN, else one is made up and shown once."
        ),
    )
    relay.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    relay.add_argument(
        "--port", type=_count(0, 65535), default=8000, help="port (default: %(default)s; 0: any)"
    )
    relay.add_argument(
        "--token",
        metavar="TOKEN",
        help="the bearer token clients must present (at least 16 characters)",
    )
    relay.add_argument(
        "--origin",
        action="append",
        dest="origins",
        metavar="ORIGIN",
        help="a browser origin allowed to connect (repeatable; default: the relay's own)",
    )
    relay.add_argument(
        "--max-frame",
        type=_count(1024, 64 * 1024 * 1024),
        default=1024 * 1024,
        metavar="BYTES",
        help="the largest frame or request body accepted (default: %(default)s)",
    )
    relay.add_argument(
        "--max-tokens",
        type=_count(1, 2**31 - 1),
        default=None,
        metavar="N",
        help="the most output tokens one request may ask for: a larger or missing max_tokens "
        "is lowered (or set) to N, a request with extra vendor options is refused, and the "
        "cap is said in the hello's answer (default: no cap)",
    )
    relay.add_argument(
        "--grace",
        type=_seconds(0, 3600),
        default=5.0,
        metavar="SECONDS",
        help="on Ctrl-C or SIGTERM, how long open requests get to receive their shutdown frame "
        "or line before they are cut (default: %(default)s)",
    )
    relay.add_argument(
        "--allowed-host",
        action="append",
        dest="allowed_hosts",
        metavar="HOST",
        help="a host name the relay answers to besides the bind address and localhost "
        "(repeatable; checked against the Host header)",
    )
    durable = relay.add_argument_group(
        "durable jobs",
        "With --store, the relay also serves durable jobs at /v1/jobs (submit, show, cancel, "
        "answer, follow their events), run by workers here and in any other process on the "
        "store (trio-agents worker).",
    )
    durable.add_argument("--store", metavar="URL", help=_STORE_HELP)
    relay.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        help="the agents served -- run in memory for AG-UI, the AI SDK stream, the OpenAI "
        "endpoint and A2A, and the agents jobs may name: an AgentRegistry (or a function "
        "returning one, given the runtime or nothing), as a worker's --app (default: one "
        "agent, 'assistant', on the relay's model, with an add tool)",
    )
    durable.add_argument(
        "--workers",
        type=_count(0, 10000),
        default=None,
        metavar="N",
        help="jobs run at once in this process (default: 4; 0: none here -- other "
        "processes' workers run them, and any agent name is admitted unless --app is given)",
    )
    _endpoint_options(relay, 0.02, think=False)  # thinking is each client's option
    _debug_option(relay)
    _durable_commands(commands)
    _mcp_command(commands)
    _simulator_command(commands)
    return parser


#: Where ``trio-agents simulator`` listens unless told otherwise (``serve`` and ``mcp`` take
#: 8000, llama.cpp's server 8080).
SIMULATOR_PORT = 8100


def _simulator_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    simulator = commands.add_parser(
        "simulator",
        help="serve the offline model simulator, for other processes to talk to",
        description=(
            "Serve the offline model simulator on 127.0.0.1 until Ctrl-C or SIGTERM: an "
            "OpenAI-compatible endpoint (chat completions and the Responses API) at /v1, "
            "Anthropic Messages and Ollama's /api/chat at the root. It answers deterministically "
            "-- echoes, counts, adds with an 'add' tool, calls a tool a prompt names -- with no "
            "network and no API key: point a worker's or an MCP server's --app at it, or any "
            "OpenAI-compatible client (--base-url)."
        ),
    )
    simulator.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default: %(default)s)"
    )
    simulator.add_argument(
        "--port",
        type=_count(0, 65535),
        default=SIMULATOR_PORT,
        help="port (default: %(default)s; 0: any free one, printed)",
    )
    simulator.add_argument(
        "--interval",
        type=_interval,
        default=0.0,
        metavar="SECONDS",
        help="the pause between streamed deltas (default: %(default)s: at once)",
    )
    simulator.add_argument(
        "--api-key",
        metavar="KEY",
        help="make requests carry this key (Authorization: Bearer or x-api-key); default: none",
    )
    _debug_option(simulator)


def _mcp_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = commands.add_parser(
        "mcp",
        help="serve an agent or a tool registry as MCP tools (stdio or streamable HTTP)",
        description=(
            "Serve --app as MCP tools: an Agent is one tool taking a prompt, a tool (@tool) is "
            "served alone, a ToolRegistry is its tools. Over stdio by default (for a client "
            "that starts this command); --http serves streamable HTTP on --host (127.0.0.1) "
            "and --port instead. A client's cancellation cuts the agent's run, which commits "
            "its partial. Needs pip install 'trio-agents[mcp]'."
        ),
    )
    mcp.add_argument(
        "--app",
        required=True,
        metavar="MODULE:ATTR",
        help="an Agent, a tool, a ToolRegistry or a list of tools, or a function (given the "
        "runtime, or nothing; may be async) returning one",
    )
    mcp.add_argument("--http", action="store_true", help="serve streamable HTTP, not stdio")
    mcp.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    mcp.add_argument(
        "--port", type=_count(0, 65535), default=8000, help="port (default: %(default)s; 0: any)"
    )
    mcp.add_argument("--path", default="/mcp", help="the endpoint's path (default: %(default)s)")
    mcp.add_argument(
        "--token",
        metavar="TOKEN",
        help="with --http: the bearer token every request must carry (at least 16 characters; "
        "needed to serve beyond this machine); default: $TRIO_AGENTS_MCP_TOKEN",
    )
    mcp.add_argument(
        "--session-history",
        action="store_true",
        help="an agent keeps one conversation per MCP session (the calls of a session see the "
        "ones before); default: every call starts a fresh conversation. Never shared between "
        "sessions",
    )
    _debug_option(mcp)


_STORE_HELP = (
    "the job store: sqlite:///PATH (sqlite:////absolute/path for an absolute path) or "
    "postgresql://USER@HOST/DB[?schema=NAME]"
)


def _durable_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = commands.add_parser(
        "worker",
        help="run a worker of the durable job queue on a store",
        description=(
            "Take jobs from the store and run them as journaled agent runs, continuing where a "
            "crashed worker stopped once its lease expires. Several workers, in several "
            "processes, may share one store. SIGINT or SIGTERM: take no more jobs, give the "
            "running ones --grace seconds, cut the rest (left recoverable), exit 0."
        ),
    )
    worker.add_argument("--store", required=True, metavar="URL", help=_STORE_HELP)
    worker.add_argument(
        "--app",
        required=True,
        metavar="MODULE:ATTR",
        help="an AgentRegistry (or a function returning one, given the runtime or nothing)",
    )
    worker.add_argument(
        "--concurrency",
        type=_count(1, 10000),
        default=4,
        metavar="N",
        help="jobs run at once (default: %(default)s)",
    )
    worker.add_argument(
        "--lease",
        type=_seconds(1, 3600),
        default=30.0,
        metavar="SECONDS",
        help="how long a dead worker's jobs wait before another takes them (default: %(default)s)",
    )
    worker.add_argument(
        "--grace",
        type=_seconds(0, 3600),
        default=10.0,
        metavar="SECONDS",
        help="on SIGINT/SIGTERM, how long running jobs get to finish (default: %(default)s)",
    )
    worker.add_argument(
        "--poll",
        type=_seconds(0.01, 60),
        default=0.5,
        metavar="SECONDS",
        help="how often an idle worker looks for jobs (default: %(default)s)",
    )
    _debug_option(worker)
    jobs = commands.add_parser(
        "jobs",
        help="submit, show, list, cancel, answer, purge, wait for or watch durable jobs",
        description="Durable jobs, through the store alone (no worker needed to submit).",
    )
    actions = jobs.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=text, description=text)
        sub.add_argument("--store", required=True, metavar="URL", help=_STORE_HELP)
        _debug_option(sub)
        return sub

    submit = action(
        "submit",
        "admit a job asking AGENT with TEXT, or with the messages of --input-json; prints its "
        "id (the only action that creates a store; warns when no worker has ever run on it)",
    )
    submit.add_argument("--agent", required=True, help="the agent's name in the workers' registry")
    submit.add_argument("--key", help="an idempotency key: submitting again returns the same job")
    submit.add_argument("--json", action="store_true", help='print {"id": ...}')
    submit.add_argument(
        "--input-json",
        metavar="FILE",
        help='the job\'s input instead of TEXT: a JSON list of messages, such as [{"role": '
        '"user", "content": "..."}], read from FILE (- for stdin)',
    )
    submit.add_argument("text", nargs="?", help="the user message")
    show = action("show", "show a job: status, attempts, result or error")
    show.add_argument("id")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    listing = action("list", "list jobs in admission order")
    listing.add_argument(
        "--status",
        choices=[
            "queued",
            "running",
            "awaiting_input",
            "completed",
            "partial",
            "failed",
            "cancelled",
            "abandoned",
        ],
    )
    listing.add_argument("--limit", type=_count(1, 1000), default=100, metavar="N")
    listing.add_argument("--json", action="store_true", help="print one JSON array")
    cancel = action(
        "cancel", "cancel a job (a running one is cut wherever it runs; exit 1 if it had ended)"
    )
    cancel.add_argument("id")
    answer = action(
        "answer", "answer an approval or a question a job waits for (exit 1 if it has ended)"
    )
    answer.add_argument("id")
    answer.add_argument("call_id", help="the tool call's id (jobs show lists them)")
    verdict = answer.add_mutually_exclusive_group(required=True)
    verdict.add_argument("--allow", action="store_true", help="let the call run")
    verdict.add_argument("--deny", action="store_true", help="refuse it (or decline a question)")
    verdict.add_argument(
        "--answer",
        action="append",
        metavar="VALUE",
        help="answer a question: its text, an option, a number; for several options repeat "
        "it, or give them comma-separated or as a JSON array (checked against the question: "
        "an answer it refuses writes nothing)",
    )
    answer.add_argument("--reason", help="what the model reads about the answer")
    purge = action("purge", "remove an ended job, leaving a tombstone")
    purge.add_argument("id")
    wait = action(
        "wait",
        "wait until a job ends and show it (exit 1 unless completed; 124 if --timeout passed)",
    )
    wait.add_argument("id")
    wait.add_argument(
        "--timeout",
        type=_seconds(0, 10**6),
        metavar="SECONDS",
        help="give up after this long: one line on stderr, exit status 124",
    )
    wait.add_argument("--poll", type=_seconds(0.01, 60), default=0.5, metavar="SECONDS")
    wait.add_argument("--json", action="store_true", help="print one JSON object")
    watch = action(
        "watch",
        "print a job's events as they come, until it ends or waits for input (exit 0 if it "
        "completed, 1 if it failed or ended partial, 3 if cancelled, 4 if it awaits input)",
    )
    watch.add_argument("id")
    watch.add_argument(
        "--after",
        type=_count(0, 10**18),
        default=0,
        metavar="N",
        help="start after the event of seq N (default: from the first)",
    )
    watch.add_argument("--poll", type=_seconds(0.01, 60), default=0.5, metavar="SECONDS")
    watch.add_argument("--json", action="store_true", help="print one JSON object per event")
    store = commands.add_parser(
        "store",
        help="look after a job store (migrate its schema)",
        description="Look after a job store.",
    )
    store_actions = store.add_subparsers(dest="action", metavar="ACTION", required=True)
    migrate = store_actions.add_parser(
        "migrate",
        help="bring the store's schema up to date (creating it if needed)",
        description=(
            "Bring the store's schema up to date, in one transaction, creating it if needed; "
            "workers do the same when they start. A schema newer than this trio-agents is "
            "refused."
        ),
    )
    migrate.add_argument("--store", required=True, metavar="URL", help=_STORE_HELP)
    _debug_option(migrate)
