"""The core runtime (``actors._core._runtime``) alone, and the public one built on it
(``actors._runtime``): the features' conveniences live above the core, and the public
``Runtime``/``open_runtime`` keep every method, attribute and keyword."""

from __future__ import annotations

import inspect

import trio
import trio.testing
from actor_helpers import HANG, Journal, Recorder

import actors
from actors._core import _runtime as core
from actors._live import LiveRuns


async def test_a_core_runtime_spawns_looks_up_and_counts_without_the_features(
    autojump_clock: trio.testing.MockClock,
) -> None:
    journal = Journal()
    with trio.fail_after(HANG):
        async with core.open_runtime(max_restarts=1, period=1.0) as runtime:
            assert type(runtime) is core.Runtime
            for feature in ("agent", "connect", "watch", "live"):
                assert not hasattr(runtime, feature)
            ref = await runtime.spawn(lambda: Recorder("a", journal), name="a", register=True)
            assert runtime.lookup("a") == ref
            assert await ref.call("hello") == "hello"
            assert len(runtime.statistics().children) == 1
            assert runtime.root.max_restarts == 1
    assert journal.count("stop", "a") == 1


async def test_the_public_runtime_is_the_core_one_with_the_features(
    autojump_clock: trio.testing.MockClock,
) -> None:
    assert issubclass(actors.Runtime, core.Runtime)
    for feature in ("agent", "connect", "watch", "spawn", "start", "lookup", "statistics"):
        assert callable(getattr(actors.Runtime, feature))
    with trio.fail_after(HANG):
        async with actors.open_runtime(event_capacity=7, keep_events=3.0) as runtime:
            assert type(runtime) is actors.Runtime
            assert isinstance(runtime.live, LiveRuns)
            assert runtime.live.capacity == 7
            assert runtime.live.keep == 3.0


def test_the_public_open_runtime_keeps_its_keywords() -> None:
    public = inspect.signature(actors.open_runtime).parameters
    assert list(public) == [
        "max_restarts",
        "period",
        "backoff",
        "rng",
        "event_capacity",
        "keep_events",
    ]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in public.values())
    assert list(inspect.signature(core.open_runtime).parameters) == list(public)[:4]
