"""The ``trio-agents`` command line: ``main`` and one private module per command (``_demo``,
``_chat``, ``_serve``)."""

from ._main import build_parser as build_parser
from ._main import describe_error as describe_error
from ._main import main as main

__all__ = ["build_parser", "describe_error", "main"]
