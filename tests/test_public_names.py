"""Every public name resolves from where it was importable when the layout was pinned.

``tests/fixtures/public_names.json`` lists, per public module (no ``_`` in its path), the names
of its ``__all__`` as they were before the code was re-laid out (issue 12). Moving code is free;
breaking an import a user wrote is not: each of these must keep resolving, to the same object
its package re-exports. Adding names is fine; removing one is a deliberate change made here.
"""

from __future__ import annotations

import importlib
import json
import pathlib

import pytest

PINNED = json.loads(
    (pathlib.Path(__file__).parent / "fixtures" / "public_names.json").read_text(encoding="utf-8")
)


@pytest.mark.parametrize("module", sorted(PINNED))
def test_every_pinned_public_name_still_resolves(module: str) -> None:
    imported = importlib.import_module(module)
    missing = [name for name in PINNED[module] if not hasattr(imported, name)]
    assert not missing, f"{module} no longer has {missing}"
    exported = set(getattr(imported, "__all__", ()))
    assert set(PINNED[module]) <= exported, (
        f"{module}.__all__ lost {set(PINNED[module]) - exported}"
    )


def test_the_pin_covers_both_packages() -> None:
    assert {"actors", "protocols", "actors.providers", "protocols.wire"} <= set(PINNED)
    assert sum(len(names) for names in PINNED.values()) > 300
