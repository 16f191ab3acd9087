"""The ``trio-agents`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import _demo
from ._version import __version__

__all__ = ["build_parser", "main"]


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value <= 10:
        raise argparse.ArgumentTypeError(f"must be from 0 to 10 seconds, not {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``trio-agents`` command and its sub-commands."""
    parser = argparse.ArgumentParser(
        prog="trio-agents",
        description="trio-agents: a runtime for LLM agents built on trio.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="stream a completion from the offline simulator",
        description=(
            "Start the offline model simulator on 127.0.0.1 and stream one completion from it "
            "through the OpenAI-compatible HTTP provider. No network or API key needed."
        ),
    )
    demo.add_argument(
        "prompt",
        nargs="?",
        default=None,
        help="what to ask (default: a count to 12); try 'count to 40', 'What is 19 + 23?'",
    )
    demo.add_argument(
        "--interval",
        type=_interval,
        default=0.05,
        metavar="SECONDS",
        help="pause between streamed deltas (default: %(default)s)",
    )
    demo.add_argument(
        "--no-think", dest="think", action="store_false", help="do not ask for reasoning"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``) and return the exit status.

    With no sub-command it prints the help and returns 0.
    """
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.command == "demo":
        prompt = args.prompt if args.prompt is not None else _demo.DEFAULT_PROMPT
        return _demo.main(prompt=prompt, interval=args.interval, think=args.think, out=sys.stdout)
    parser.print_help()
    return 0
