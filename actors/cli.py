"""The ``trio-agents`` command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._version import __version__

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``trio-agents`` command (sub-commands are added as they land)."""
    parser = argparse.ArgumentParser(
        prog="trio-agents",
        description="trio-agents: a runtime for LLM agents built on trio.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {__version__}", help="print the version"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``) and return the exit status.

    With no sub-command it prints the help and returns 0.
    """
    parser = build_parser()
    parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    parser.print_help()
    return 0
