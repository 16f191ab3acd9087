"""The ``trio-agents`` command line: ``demo`` (a team of agents), ``chat`` (a terminal chat),
``serve`` (a relay with a browser chat page), ``worker`` (a durable job queue's worker),
``jobs`` (durable jobs: submit, show, list, cancel, answer, purge, wait, watch), ``store``,
``mcp`` (MCP tools served) and ``simulator`` (the offline model as a server).

The commands' modules (and ``rich``) are imported only when a command runs, so importing
:mod:`actors` stays light. The parser is ``_parser``; what an error says, ``_errors``: the
commands' modules import those two, never this one.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import traceback
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, TextIO

from ._errors import _app_error, _interrupted, _unchain, describe_error
from ._parser import build_parser

if TYPE_CHECKING:
    from ._demo import Endpoint

__all__ = ["build_parser", "describe_error", "main"]

#: The loggers the command line shows on stderr (the library logs under this name).
LOGGER = "trio_agents"


def _endpoint(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Endpoint | None:
    if getattr(args, "model", None) is None:
        if not hasattr(args, "model"):
            return None
        if args.base_url is not None or args.api_key is not None:
            parser.error("--base-url and --api-key need --model (the model to ask)")
        return None
    from ._demo import Endpoint  # noqa: PLC0415 - rich loads only when a command runs

    return Endpoint(model=args.model, base_url=args.base_url, api_key=args.api_key)


class _OneLine(logging.Formatter):
    """A log record as one line, without its traceback (``--debug`` shows those)."""

    def format(self, record: logging.LogRecord) -> str:
        message = " ".join(record.getMessage().split())
        return f"trio-agents: {record.levelname.lower()}: {record.name}: {message}"


@contextlib.contextmanager
def _logging(debug: bool, stream: TextIO) -> Iterator[None]:
    """While a command runs: the library's warnings as one line each on ``stream``, or with
    ``debug`` everything it logs, tracebacks included. Put back as it was afterwards."""
    logger = logging.getLogger(LOGGER)
    handler = logging.StreamHandler(stream)
    if debug:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    else:
        handler.setFormatter(_OneLine())
        handler.setLevel(logging.WARNING)
    level = logger.level
    if debug:
        logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _warn_without_key(command: str, endpoint: Endpoint | None) -> None:
    if endpoint is not None and not endpoint.has_key:
        print(
            f"trio-agents {command}: warning: no API key for {endpoint.where} "
            "(--api-key or $OPENAI_API_KEY); fine for a local server that needs none",
            file=sys.stderr,
        )


#: The exit status after Ctrl-C (SIGINT), as a shell reports a process it ended.
INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``) and return the exit status.

    With no sub-command it prints the help and returns 0. An error the user can act on (see
    :func:`describe_error`) is one line on stderr and exit status 1; ``--debug`` shows its
    traceback instead (one: a failing ``--app``'s own). Ctrl-C that reaches here is one line,
    ``interrupted``, and status 130.
    """
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "chat":
        _check_relay_options(parser, args)
    submit = args.command == "jobs" and args.action == "submit"
    if submit and (args.text is None) == (args.input_json is None):
        parser.error("jobs submit takes the user message TEXT or --input-json FILE, one of them")
    if args.command == "demo" and args.prompt is not None and args.db is not None:
        # A single streamed answer keeps no conversation: say so rather than ignore --db.
        parser.error("--db saves the team demo's conversations; a single PROMPT saves nothing")
    endpoint = _endpoint(parser, args)
    _warn_without_key(args.command, endpoint)
    with _logging(args.debug, sys.stderr):
        try:
            return _run(args, endpoint)
        except Exception as error:
            if args.debug and (app := _app_error(error)) is not None:
                traceback.print_exception(app.error)  # the app's traceback alone, not ours
                return 1
            where = endpoint.where if endpoint is not None else None
            line = None if args.debug else describe_error(error, where)
            if line is None:
                _unchain(error)
                raise
            print(f"trio-agents {args.command}: {line}", file=sys.stderr)
            return 1
        except BaseException as error:
            if not _interrupted(error):
                raise
            if args.debug:
                traceback.print_exception(error)
            print(f"trio-agents {args.command}: interrupted", file=sys.stderr)
            return INTERRUPTED


def _check_relay_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``chat --relay``: the relay holds the model, so the model options do not apply; its
    token is --token, else $TRIO_AGENTS_RELAY_TOKEN."""
    if args.relay is None:
        if args.token is not None:
            parser.error("--token is the relay's: it needs --relay URL")
        return
    given = [
        option
        for option, value in (
            ("--model", args.model),
            ("--base-url", args.base_url),
            ("--api-key", args.api_key),
        )
        if value is not None
    ]
    if given:
        named = " and ".join(given) + (" does" if len(given) == 1 else " do")
        parser.error(f"--relay: the relay holds the model, so {named} not apply")
    if args.token is None:
        import os  # noqa: PLC0415

        args.token = os.environ.get("TRIO_AGENTS_RELAY_TOKEN") or None
    if args.token is None:
        parser.error("--relay needs the relay's token: --token TOKEN or $TRIO_AGENTS_RELAY_TOKEN")


def _run(args: argparse.Namespace, endpoint: Endpoint | None) -> int:
    if args.command == "demo":
        from . import _demo  # noqa: PLC0415 - rich loads only when a command runs

        return _demo.main(
            out=sys.stdout,
            prompt=args.prompt,
            interval=args.interval,
            think=args.think,
            agents=args.agents,
            db=args.db,
            endpoint=endpoint,
            concurrency=args.concurrency,
        )
    if args.command == "worker":
        from . import _jobs  # noqa: PLC0415

        return _jobs.worker_main(
            store=args.store,
            app=args.app,
            concurrency=args.concurrency,
            lease=args.lease,
            grace=args.grace,
            poll=args.poll,
            out=sys.stdout,
        )
    if args.command == "jobs":
        from . import _jobs  # noqa: PLC0415

        return _jobs.jobs_main(args.action, args, sys.stdout)
    if args.command == "store":
        from . import _jobs  # noqa: PLC0415

        return _jobs.store_main(args.action, args, sys.stdout)
    if args.command == "mcp":
        from . import _mcp  # noqa: PLC0415 - the mcp SDK loads only when this command runs

        return _mcp.mcp_main(
            app=args.app,
            http=args.http,
            host=args.host,
            port=args.port,
            path=args.path,
            token=args.token,
            session_history=args.session_history,
            out=sys.stdout,
        )
    if args.command == "simulator":
        from . import _simulator  # noqa: PLC0415

        return _simulator.main(
            host=args.host, port=args.port, interval=args.interval, api_key=args.api_key
        )
    if args.command == "chat":
        from . import _chat  # noqa: PLC0415 - rich loads only when a command runs

        return _chat.main(
            interval=args.interval,
            think=args.think,
            db=args.db,
            endpoint=endpoint,
            resume=args.resume,
            relay=None if args.relay is None else _chat.Relay(args.relay, args.token),
        )
    from . import _serve as _serve_cmd  # noqa: PLC0415 - hypercorn loads only when needed

    return _serve_cmd.main(
        host=args.host,
        port=args.port,
        token=args.token,
        origins=args.origins,
        endpoint=endpoint,
        interval=args.interval,
        max_frame=args.max_frame,
        grace=args.grace,
        allowed_hosts=args.allowed_hosts,
        max_tokens=args.max_tokens,
        store=args.store,
        app=args.app,
        workers=args.workers,
    )
