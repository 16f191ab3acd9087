"""The installed distribution's version, read once from its metadata."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__: str = version("trio-agents")
except PackageNotFoundError:  # pragma: no cover - only when run from a source tree never installed
    __version__ = "0+unknown"
