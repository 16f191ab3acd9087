"""The relay's runs (protocol version 3): every request is a run with a server-minted id and an
event log, followed again by id -- over the websocket (``watch``), as Server-Sent Events, or by
polling (002's continuation rule) -- by the token that started it and nobody else; a run may
outlive its connection (``cancel_on_disconnect=False``), and ``RelayProvider`` then resumes it.

Real parts only: ``RelayServer`` on hypercorn on loopback port 0, raw websocket clients
(:class:`~test_relay.Raw`), ``RelayProvider``, httpx. The upstream is :class:`Tap`, which the
test feeds piece by piece, or the :class:`~test_relay.Upstream` of test_relay.py. Everything runs
on trio's mock clock (autojump): no real sleeps.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import random
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from test_relay import (
    OTHER,
    TOKEN,
    WRONG,
    Proxy,
    Raw,
    Upstream,
    relay,
    running,
    server,
    until,
    ws_url,
)

from actors.providers import ProviderStream, StreamingProvider
from actors.relay import RelayLimits, RelayProvider, RelayServer, RelayToken
from actors.relay._runs import frames as follower_frames
from protocols.authority import Authority, Rule
from protocols.errors import ConfigError, ProviderError
from protocols.live import RunEvent, event_from_json
from protocols.messages import (
    Delta,
    FinishReason,
    Message,
    ProviderOptions,
    ProviderResult,
    ToolCall,
    ToolDefinition,
    Usage,
)
from protocols.relay import (
    RUN_ID_HEADER,
    RUN_STATE_HEADER,
    TAIL_INDEX_HEADER,
    AbortFrame,
    ApprovalFrame,
    ApproveFrame,
    CancelFrame,
    DeltaFrame,
    ErrorFrame,
    HelloFrame,
    ReadyFrame,
    ResultFrame,
    RunContinuation,
    RunFrame,
    ServerFrame,
    StreamFrame,
    WatchFrame,
    decode_server_frame,
    encode_frame,
    error_frame,
)
from protocols.sse import SSEComment, SSEDecoder, SSEEvent

RUN_ID = re.compile(r"run_[A-Za-z0-9_-]{22}")


@pytest.fixture(autouse=True)
def _autojump(mock_clock: trio.testing.MockClock) -> None:
    mock_clock.autojump_threshold = 0.05


# -- an upstream the test feeds -----------------------------------------------------------------


class Tap(StreamingProvider):
    """A provider whose calls stream what the test :meth:`give`\\ s, one call at a time:
    :meth:`end` finishes the current call (with :attr:`calls_made` tool calls, if any)."""

    name = "tap"

    def __init__(self, *, calls: Sequence[ToolCall] = ()) -> None:
        self._in, self._out = trio.open_memory_channel[str | None](math.inf)
        self.tool_calls = tuple(calls)
        self.calls = 0  # stream() calls
        self.closed = 0  # streams released
        self.finished = 0  # streams that ran to their end

    def give(self, *pieces: str) -> None:
        for piece in pieces:
            self._in.send_nowait(piece)

    def end(self) -> None:
        self._in.send_nowait(None)

    def stream(
        self,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] | None = None,
        options: ProviderOptions | None = None,
    ) -> ProviderStream:
        self.calls += 1
        return _TapStream(self)


class _TapStream(ProviderStream):
    def __init__(self, tap: Tap) -> None:
        self._tap = tap
        self._content: list[str] = []
        self._result: ProviderResult | None = None
        self._closed = False

    async def __anext__(self) -> Delta:
        if self._result is not None:
            raise StopAsyncIteration
        piece = await self._tap._out.receive()
        if piece is None:
            tap = self._tap
            finish = FinishReason.TOOL_CALLS if tap.tool_calls else FinishReason.STOP
            self._result = ProviderResult(
                content="".join(self._content),
                calls=tap.tool_calls,
                usage=Usage(3, 4),
                finish=finish,
            )
            tap.finished += 1
            raise StopAsyncIteration
        self._content.append(piece)
        return Delta("content", piece)

    @property
    def result(self) -> ProviderResult:
        assert self._result is not None
        return self._result

    @property
    def partial(self) -> ProviderResult:
        return ProviderResult(content="".join(self._content), finish=FinishReason.CANCELLED)

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._tap.closed += 1
        await trio.lowlevel.checkpoint()


# -- helpers -------------------------------------------------------------------------------------


def hello3(token: str = TOKEN) -> str:
    return encode_frame(HelloFrame(3, token))


def start(request_id: str, text: str, *, outlive: bool = False) -> str:
    return encode_frame(
        StreamFrame(request_id, [Message.user(text)], cancel_on_disconnect=not outlive)
    )


def watch(request_id: str, run_id: str, after: int = 0) -> str:
    return encode_frame(WatchFrame(request_id, run_id, after))


@asynccontextmanager
async def speaking(url: str, token: str = TOKEN) -> AsyncIterator[Raw]:
    """A raw websocket client that said hello with version 3."""
    async with Raw.connect(url) as raw:
        await raw.send(hello3(token))
        ready = await raw.frame()
        assert isinstance(ready, ReadyFrame), ready
        assert ready.version == 3
        yield raw


async def until_frames(raw: Raw, request_id: str) -> list[ServerFrame]:
    """Frames of ``request_id`` up to the one that ends it (others are dropped)."""
    out: list[ServerFrame] = []
    while True:
        frame = await raw.frame()
        if getattr(frame, "id", None) != request_id:
            continue
        out.append(frame)
        if isinstance(frame, ResultFrame | AbortFrame | ErrorFrame):
            return out


async def watched(model: RelayProvider, run_id: str) -> list[str]:
    """The texts of ``model.watch(run_id)``, to its end."""
    async with model.watch(run_id) as followed:
        return [delta.text async for delta in followed]


async def cut_while_streaming(model: RelayProvider, proxy: Switch, tap: Tap) -> None:
    """Stream; at the first delta, drop the connection and let no new one through."""
    async with model.stream([Message.user("go")]) as stream:
        tap.give("so far")
        async for _ in stream:
            proxy.down = True
            proxy.cut()


def text_of(frames: Sequence[ServerFrame]) -> str:
    return "".join(f.text for f in frames if isinstance(f, DeltaFrame) and f.channel == "content")


def seqs_of(frames: Sequence[ServerFrame]) -> list[int]:
    return [f.seq for f in frames if getattr(f, "seq", None) is not None]  # type: ignore[attr-defined]


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def sse(
    client: httpx.AsyncClient, url: str, run_id: str, *, token: str = TOKEN, **kwargs: Any
) -> tuple[httpx.Response, list[SSEEvent | SSEComment]]:
    """The run's event stream, read to its end."""
    decoder = SSEDecoder()
    items: list[SSEEvent | SSEComment] = []
    headers = {**bearer(token), **kwargs.pop("headers", {})}
    async with client.stream(
        "GET", f"{url}/v1/runs/{run_id}/events", headers=headers, **kwargs
    ) as response:
        async for chunk in response.aiter_bytes():
            items.extend(decoder.feed(chunk))
    return response, items


def events_of(items: Sequence[SSEEvent | SSEComment]) -> list[RunEvent]:
    out = []
    for item in items:
        if isinstance(item, SSEEvent):
            event = event_from_json(json.loads(item.data))
            assert item.id == str(event.seq)  # id: is the seq
            assert item.event == event.kind
            out.append(event)
    return out


def text_in(events: Sequence[RunEvent]) -> str:
    return "".join(e.data["text"] for e in events if e.kind == "content")


# -- a follower's frames, without an event loop --------------------------------------------------


PIECES = st.lists(
    st.tuples(st.sampled_from(["content", "thinking", "usage"]), st.text(min_size=1, max_size=4)),
    min_size=1,
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(PIECES, st.data())
def test_a_followers_frames_hold_every_piece_once_and_resume_after_any_of_them(
    pieces: list[tuple[str, str]], data: st.DataObject
) -> None:
    """Consecutive pieces of one channel travel as one frame, whose seq is its last piece's:
    whatever the frames, following on after any frame's seq gives exactly the rest."""
    events = [
        RunEvent("run_x", seq, kind, 0.0, {"text": text} if kind != "usage" else {"usage": None})
        for seq, (kind, text) in enumerate(pieces, start=1)
    ]
    events.append(RunEvent("run_x", len(events) + 1, "cancelled", 0.0, {"response": {}}))
    wanted = _chars((e.kind, e.data["text"]) for e in events if "text" in e.data)

    whole = follower_frames(events, "w")
    assert isinstance(whole[-1], AbortFrame)
    assert whole[-1].seq == events[-1].seq
    assert _chars(_said(whole)) == wanted
    deltas = [f for f in whole if isinstance(f, DeltaFrame)]
    # Never two frames of one channel in a row: what could travel together did.
    assert all(a.channel != b.channel for a, b in itertools.pairwise(deltas))
    # Resuming after the seq of the last frame the follower had: the rest, nothing twice.
    cut = data.draw(st.integers(0, len(whole) - 1))
    had = whole[:cut]
    after = max([f.seq or 0 for f in had if isinstance(f, DeltaFrame)] or [0])
    rest = follower_frames([e for e in events if e.seq > after], "w")
    assert _chars(_said(had)) + _chars(_said(rest)) == wanted
    assert rest[-1] == whole[-1]


def _said(sent: Sequence[ServerFrame]) -> list[tuple[str, str]]:
    return [(f.channel, f.text) for f in sent if isinstance(f, DeltaFrame)]


def _chars(pieces: Any) -> list[tuple[str, str]]:
    """Text as (channel, character) pairs: the same whatever its pieces."""
    return [(channel, char) for channel, text in pieces for char in text]


# -- the websocket: run ids and seqs -------------------------------------------------------------


async def test_a_request_of_version_3_is_told_its_run_first_and_each_frame_its_seq() -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, speaking(url) as raw:
        await raw.send(start("a", "one two three"))
        frames = await until_frames(raw, "a")
        await raw.send(start("b", "four"))
        other = await until_frames(raw, "b")
    run = frames[0]
    assert isinstance(run, RunFrame)
    assert RUN_ID.fullmatch(run.run_id)
    assert isinstance(other[0], RunFrame)
    assert other[0].run_id != run.run_id  # minted per request
    assert text_of(frames) == "one two three "
    assert isinstance(frames[-1], ResultFrame)
    seqs = seqs_of(frames)
    assert seqs == sorted(set(seqs))  # rising, none twice
    assert seqs[-1] == frames[-1].seq  # the result's seq is the run's last (its terminal event)
    assert app.statistics().runs == 2  # kept, ended, to be followed


async def test_a_client_of_version_2_sees_no_run_but_its_request_is_a_run_all_the_same() -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, Raw.connect(url) as raw:
        await raw.ready()  # version 2
        await raw.send(start("a", "one two"))
        frames = await until_frames(raw, "a")
    assert [type(f) for f in frames] == [DeltaFrame, DeltaFrame, ResultFrame]
    assert seqs_of(frames) == []
    assert all('"seq"' not in text for text in raw.texts)
    assert app.statistics().runs == 1


async def test_a_watch_replays_a_finished_run_then_from_any_seq() -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url:
        async with speaking(url) as first:
            await first.send(start("a", "alpha beta gamma delta"))
            frames = await until_frames(first, "a")
        run_id = frames[0].run_id  # type: ignore[union-attr]
        result = frames[-1]
        assert isinstance(result, ResultFrame)
        async with speaking(url) as second:
            await second.send(watch("w", run_id))
            replay = await until_frames(second, "w")
            assert replay[0] == RunFrame("w", run_id)
            assert text_of(replay) == text_of(frames)
            # The log's pieces travel together on a replay, as the upstream's do live.
            assert len([f for f in replay if isinstance(f, DeltaFrame)]) == 1
            assert replay[-1] == ResultFrame("w", result.result, result.seq)
            # From any seq: only what came after it.
            for frame in frames[1:-1]:
                assert isinstance(frame, DeltaFrame)
                assert frame.seq is not None
                await second.send(watch(f"w{frame.seq}", run_id, frame.seq))
                rest = await until_frames(second, f"w{frame.seq}")
                assert text_of(frames).endswith(text_of(rest))
                assert text_of(frames) == text_of(
                    [f for f in frames if (getattr(f, "seq", 0) or 0) <= frame.seq]
                ) + text_of(rest)
    assert up.calls == 1  # a watch never calls the upstream


async def test_a_watch_follows_a_running_run_live_through_its_end() -> None:
    tap = Tap()
    app = server(tap)
    async with running(app) as url, speaking(url) as owner, speaking(url) as watcher:
        await owner.send(start("a", "go"))
        run = await owner.frame()
        assert isinstance(run, RunFrame)
        tap.give("one ")
        assert await owner.frame() == DeltaFrame("a", "content", "one ", 1)
        await watcher.send(watch("w", run.run_id))
        assert await watcher.frame() == RunFrame("w", run.run_id)
        assert await watcher.frame() == DeltaFrame("w", "content", "one ", 1)  # replayed
        tap.give("two ")
        assert await watcher.frame() == DeltaFrame("w", "content", "two ", 2)  # live
        assert await owner.frame() == DeltaFrame("a", "content", "two ", 2)
        tap.end()
        done = await until_frames(watcher, "w")
        mine = await until_frames(owner, "a")
    assert isinstance(done[-1], ResultFrame)
    assert isinstance(mine[-1], ResultFrame)
    assert done[-1].result == mine[-1].result
    assert done[-1].seq == mine[-1].seq


async def test_a_watched_run_can_be_cancelled_by_its_watcher_and_both_hear_it() -> None:
    tap = Tap()
    app = server(tap)
    async with running(app) as url, speaking(url) as owner, speaking(url) as watcher:
        await owner.send(start("a", "go"))
        run = await owner.frame()
        assert isinstance(run, RunFrame)
        tap.give("so far ")
        await owner.frame()
        await watcher.send(watch("w", run.run_id))
        await until(lambda: app.statistics().watchers == 1)
        await watcher.send(encode_frame(CancelFrame("w")))
        theirs = await until_frames(watcher, "w")
        mine = await until_frames(owner, "a")
    for frames in (theirs, mine):
        assert isinstance(frames[-1], AbortFrame)
        assert frames[-1].partial.content == "so far "
    await until(lambda: tap.closed == 1)  # the upstream stream was closed
    assert tap.finished == 0


# -- cancel_on_disconnect ------------------------------------------------------------------------


async def test_by_default_a_run_ends_with_its_connection_and_says_so_in_its_log() -> None:
    tap = Tap()
    app = server(tap)
    async with running(app) as url:
        async with speaking(url) as owner:
            await owner.send(start("a", "go"))
            run = await owner.frame()
            assert isinstance(run, RunFrame)
            tap.give("partial ")
            await owner.frame()
            await owner.abort()  # the TCP connection drops, no close frame
        await until(lambda: tap.closed == 1)
        assert app.statistics().streams == 0
        async with speaking(url) as later:
            await later.send(watch("w", run.run_id))
            frames = await until_frames(later, "w")
    assert text_of(frames) == "partial "
    assert isinstance(frames[-1], AbortFrame)  # its log ends cancelled, with the partial
    assert frames[-1].partial.content == "partial "


async def test_a_run_that_outlives_its_connection_goes_on_and_is_followed_again() -> None:
    tap = Tap()
    app = server(tap, tokens=[RelayToken(TOKEN, max_streams=1)])
    async with running(app) as url:
        async with speaking(url) as owner:
            await owner.send(start("a", "go", outlive=True))
            run = await owner.frame()
            assert isinstance(run, RunFrame)
            tap.give("before ")
            seen = await owner.frame()
            assert isinstance(seen, DeltaFrame)
            await owner.abort()
        await until(lambda: app.statistics().connections == 0)
        tap.give("while ", "away ")
        assert tap.closed == 0  # the upstream goes on
        async with speaking(url) as back:
            # The run still holds the token's only slot.
            await back.send(start("b", "another"))
            assert (await until_frames(back, "b"))[-1] == error_frame("too_many_streams", "b")
            await back.send(watch("w", run.run_id, seen.seq or 0))
            assert await back.frame() == RunFrame("w", run.run_id)
            tap.give("back")
            tap.end()
            rest = await until_frames(back, "w")
    assert seen.text + text_of(rest) == "before while away back"
    assert isinstance(rest[-1], ResultFrame)
    assert rest[-1].result.content == "before while away back"
    assert (tap.finished, tap.closed) == (1, 1)
    assert app.statistics().streams == 0


async def test_a_client_of_version_2_cannot_make_a_run_outlive_its_connection() -> None:
    tap = Tap()
    app = server(tap)
    async with running(app) as url:
        async with Raw.connect(url) as old:
            await old.ready()  # version 2
            await old.send(start("a", "go", outlive=True))  # (a version 2 client never sends it)
            tap.give("x")
            await old.frame()
            await old.abort()
        await until(lambda: tap.closed == 1)
    assert tap.finished == 0


async def test_a_watch_on_a_connection_of_version_2_is_invalid() -> None:
    app = server(Upstream())
    async with running(app) as url, Raw.connect(url) as old:
        await old.ready()
        await old.send(watch("w", "run_whatever"))
        assert await old.frame() == error_frame("invalid")
        assert await old.closed() == 1008


# -- tenancy -------------------------------------------------------------------------------------


async def test_another_tokens_run_is_not_found_exactly_like_one_that_never_was() -> None:
    tap = Tap()
    app = server(tap, tokens=[RelayToken(TOKEN, name="alice"), RelayToken(OTHER, name="bob")])
    async with running(app) as url, speaking(url) as alice, speaking(url, OTHER) as bob:
        await alice.send(start("a", "go"))
        run = await alice.frame()
        assert isinstance(run, RunFrame)
        tap.give("secret answer ")
        await alice.frame()
        await bob.send(watch("w1", run.run_id))
        theirs = await bob.frame()
        await bob.send(watch("w2", "run_" + "x" * 22))
        nothing = await bob.frame()
        await bob.send(encode_frame(CancelFrame("w1")))  # not open for bob: unknown
        cancel = await bob.frame()
        # Over HTTP: the same 404 as a run that never was, its events never shown.
        async with httpx.AsyncClient() as client:
            found = await client.get(f"{url}/v1/runs/{run.run_id}/events", headers=bearer(OTHER))
            never = await client.get(f"{url}/v1/runs/run_{'y' * 22}/events", headers=bearer(OTHER))
            polled = await client.get(
                f"{url}/v1/runs/{run.run_id}/events?startIndex=0", headers=bearer(OTHER)
            )
            cut = await client.post(f"{url}/v1/runs/{run.run_id}/cancel", headers=bearer(OTHER))
            stranger = await client.get(f"{url}/v1/runs/{run.run_id}/events", headers=bearer(WRONG))
        tap.end()
        mine = await until_frames(alice, "a")
    assert theirs == error_frame("unknown_run", "w1")
    assert nothing == error_frame("unknown_run", "w2")
    assert cancel == error_frame("unknown_request", "w1")
    for answer in (found, polled, cut):
        assert (
            (answer.status_code, answer.content)
            == (never.status_code, never.content)
            == (
                404,
                b"",
            )
        )
        assert _headers(answer) == _headers(never)
    assert stranger.status_code == 401
    assert not any("secret" in text for text in bob.texts)
    assert isinstance(mine[-1], ResultFrame)  # bob's cancel did nothing
    assert mine[-1].result.content == "secret answer "


def _headers(response: httpx.Response) -> list[tuple[str, str]]:
    return sorted((k, v) for k, v in response.headers.items() if k != "date")


async def test_a_token_sees_the_runs_its_grants_name_and_an_operator_sees_all() -> None:
    up = Upstream()
    tokens = [
        RelayToken(TOKEN, name="alice"),
        RelayToken(OTHER, name="bob", sees=("alice",)),
        RelayToken(WRONG, name="ops", sees=("*",)),
    ]
    app = server(up, tokens=tokens)
    async with running(app) as url:
        runs = {}
        for token in (TOKEN, OTHER):
            async with speaking(url, token) as raw:
                await raw.send(start("a", f"from {token[:5]}"))
                frames = await until_frames(raw, "a")
                runs[token] = frames[0].run_id  # type: ignore[union-attr]
        seen: dict[tuple[str, str], ServerFrame] = {}
        for viewer in (TOKEN, OTHER, WRONG):
            async with speaking(url, viewer) as raw:
                for owner, run_id in runs.items():
                    await raw.send(watch("w", run_id))
                    seen[viewer[:5], owner[:5]] = (await until_frames(raw, "w"))[-1]
    shown = {key: isinstance(frame, ResultFrame) for key, frame in seen.items()}
    assert shown == {
        ("relay", "relay"): True,  # alice: her own
        ("relay", "other"): False,  # not bob's
        ("other", "relay"): True,  # bob sees alice's
        ("other", "other"): True,
        ("wrong", "relay"): True,  # the operator sees all
        ("wrong", "other"): True,
    }
    assert seen["relay", "other"] == error_frame("unknown_run", "w")


def test_a_grant_must_name_exactly_one_token() -> None:
    with pytest.raises(ConfigError, match="no token has"):
        RelayServer(Upstream(), tokens=[RelayToken(TOKEN, sees=("carol",))])
    with pytest.raises(ConfigError, match="more than one token has"):
        RelayServer(
            Upstream(),
            tokens=[RelayToken(TOKEN, sees=("client",)), RelayToken(OTHER), RelayToken(WRONG)],
        )
    with pytest.raises(ConfigError, match=r"RelayToken\.sees must name tokens"):
        RelayToken(TOKEN, sees=("",))


# -- limits --------------------------------------------------------------------------------------


async def test_ended_runs_are_kept_for_run_keep_and_no_more_than_the_limits_say() -> None:
    up = Upstream()
    limits = RelayLimits(run_keep=60, max_runs_per_token=2)
    app = server(up, tokens=[TOKEN, RelayToken(OTHER, name="bob")], limits=limits)
    async with running(app) as url, speaking(url) as raw, speaking(url, OTHER) as bob:
        ids = []
        for n in range(3):
            await raw.send(start(f"a{n}", f"run {n}"))
            ids.append((await until_frames(raw, f"a{n}"))[0].run_id)  # type: ignore[union-attr]
        await bob.send(start("b", "bob's"))
        bobs = (await until_frames(bob, "b"))[0].run_id  # type: ignore[union-attr]
        # Per token: the oldest of alice's three went; bob's own is not counted against hers.
        for n, run_id in enumerate(ids):
            await raw.send(watch(f"w{n}", run_id))
            last = (await until_frames(raw, f"w{n}"))[-1]
            assert isinstance(last, ErrorFrame if n == 0 else ResultFrame), (n, last)
        assert app.statistics().runs == 3
        await trio.sleep(61)  # then every ended run goes
        await bob.send(watch("w", bobs))
        assert (await until_frames(bob, "w"))[-1] == error_frame("unknown_run", "w")
        assert app.statistics().runs == 0


async def test_the_overall_counts_and_sizes_of_kept_runs_drop_the_oldest_first() -> None:
    up = Upstream()
    app = server(up, limits=RelayLimits(max_runs=2))
    async with running(app) as url, speaking(url) as raw:
        ids = []
        for n in range(3):
            await raw.send(start(f"a{n}", f"run {n}"))
            ids.append((await until_frames(raw, f"a{n}"))[0].run_id)  # type: ignore[union-attr]
        kept = []
        for n, run_id in enumerate(ids):
            await raw.send(watch(f"w{n}", run_id))
            kept.append(isinstance((await until_frames(raw, f"w{n}"))[-1], ResultFrame))
        assert kept == [False, True, True]
    # About 6,000 characters each (the deltas, and the result repeating them): two are over
    # the 10,000 kept, one is not.
    app = server(up, limits=RelayLimits(max_kept_bytes=10_000))
    async with running(app) as url, speaking(url) as raw:
        for n in range(2):
            await raw.send(start(f"a{n}", "x" * 2000 + " " + "y" * 1000))
            await until_frames(raw, f"a{n}")
            assert app.statistics().runs == 1


async def test_a_run_whose_log_grows_over_its_limit_is_cut_with_a_clear_error() -> None:
    up = Upstream()
    app = server(up, limits=RelayLimits(max_run_bytes=100_000))
    async with running(app) as url, speaking(url) as raw:
        await raw.send(start("a", "flood"))
        frames = await until_frames(raw, "a")
    assert frames[-1] == error_frame("run_too_large", "a", frames[-1].seq)  # type: ignore[union-attr]
    # It got what the log holds, up to the limit, and nothing of the piece that would cross it.
    assert 100_000 - len(Upstream.FLOOD) < len(text_of(frames)) <= 100_000
    assert seqs_of(frames) == list(range(1, len(frames)))
    await until(lambda: up.closed == 1)


async def test_watchers_of_one_run_are_bounded() -> None:
    tap = Tap()
    app = server(tap, limits=RelayLimits(max_watchers=2))
    async with running(app) as url, speaking(url) as raw:
        await raw.send(start("a", "go"))
        run = await raw.frame()
        assert isinstance(run, RunFrame)
        for n in range(2):
            await raw.send(watch(f"w{n}", run.run_id))
            assert await raw.frame() == RunFrame(f"w{n}", run.run_id)
        await raw.send(watch("w2", run.run_id))
        refused = await raw.frame()
        async with httpx.AsyncClient() as client:
            polled = await client.get(
                f"{url}/v1/runs/{run.run_id}/events?startIndex=0", headers=bearer()
            )
        tap.end()
    assert refused == error_frame("too_many_watchers", "w2")
    assert refused.retryable  # type: ignore[union-attr]
    assert polled.status_code == 429


async def test_a_watch_after_the_runs_last_event_is_invalid() -> None:
    up = Upstream()
    app = server(up)
    async with running(app) as url, speaking(url) as raw:
        await raw.send(start("a", "one two"))
        frames = await until_frames(raw, "a")
        run_id = frames[0].run_id  # type: ignore[union-attr]
        last = frames[-1].seq  # type: ignore[union-attr]
        for after in (last, last + 5):
            await raw.send(watch("w", run_id, after))
            assert await raw.frame() == error_frame("invalid", "w")  # the connection goes on
        await raw.send(watch("w", run_id, last - 1))
        assert isinstance((await until_frames(raw, "w"))[-1], ResultFrame)


# -- approvals -----------------------------------------------------------------------------------


async def test_an_approval_of_a_run_whose_client_left_is_answered_by_its_watcher() -> None:
    call = ToolCall("c1", "add", {"a": 1, "b": 2})
    tap = Tap(calls=[call])
    app = server(tap, authority=Authority([Rule("ask", tools=("add",))]))
    async with running(app) as url:
        async with speaking(url) as owner:
            await owner.send(start("a", "go", outlive=True))
            run = await owner.frame()
            assert isinstance(run, RunFrame)
            await owner.abort()
        await until(lambda: app.statistics().connections == 0)
        tap.end()  # the reply wants the call: the relay's policy asks
        async with speaking(url) as back:
            await back.send(watch("w", run.run_id))
            assert await back.frame() == RunFrame("w", run.run_id)
            asked = await back.frame()
            assert isinstance(asked, ApprovalFrame)
            assert asked.call == call
            await back.send(encode_frame(ApproveFrame("w", "c1", "allow")))
            frames = await until_frames(back, "w")
    assert isinstance(frames[-1], ResultFrame)
    assert frames[-1].result.denied == {}  # allowed


# -- RelayProvider -------------------------------------------------------------------------------


async def test_relay_provider_resumes_a_run_across_dropped_connections() -> None:
    """Connections cut at random points (between frames, while frames are in flight): the
    caller's stream goes on with every piece exactly once, and the upstream is called once."""
    rng = random.Random(25)
    tap = Tap()
    app = server(tap)
    pieces = [f"{n} " for n in range(40)]
    async with (
        running(app) as url,
        Proxy(url).running() as proxy,
        RelayProvider(
            ws_url(proxy.url), token=TOKEN, cancel_on_disconnect=False, backoff=(0.1, 0.5)
        ) as model,
    ):
        got: list[str] = []
        async with model.stream([Message.user("count")]) as stream:
            tap.give(pieces[0])
            sent = 1
            async for delta in stream:
                got.append(delta.text)
                if sent < len(pieces):
                    batch = pieces[sent : sent + rng.randint(1, 3)]
                    tap.give(*batch)
                    sent += len(batch)
                    if rng.random() < 0.3:
                        proxy.cut()
                elif sent == len(pieces):
                    tap.end()
                    sent += 1
        run_id = stream.run_id  # type: ignore[attr-defined]
    assert "".join(got) == "".join(pieces)
    assert stream.result.content == "".join(pieces)
    assert tap.calls == 1
    assert proxy.connections > 3  # it did reconnect, several times
    assert RUN_ID.fullmatch(run_id)


class Switch(Proxy):
    """A :class:`Proxy` that, once :attr:`down`, drops every new connection at once."""

    down = False

    async def _pipe(self, client: trio.SocketStream) -> None:
        if self.down:
            await client.aclose()
            return
        await super()._pipe(client)


async def test_relay_provider_fails_disconnected_when_no_connection_comes_back() -> None:
    tap = Tap()
    app = server(tap)
    async with running(app) as url:
        proxy = Switch(url)
        async with proxy.running():
            model = RelayProvider(
                ws_url(proxy.url), token=TOKEN, cancel_on_disconnect=False, reconnects=2
            )
            async with model:
                with pytest.raises(ProviderError) as failed:
                    await cut_while_streaming(model, proxy, tap)
    assert failed.value.code == "disconnected"
    assert failed.value.partial is not None
    assert failed.value.partial.content == "so far"


async def test_relay_provider_watch_follows_a_run_from_elsewhere_and_tenancy_holds() -> None:
    tap = Tap()
    app = server(tap, tokens=[TOKEN, RelayToken(OTHER, name="bob")])
    async with (
        running(app) as url,
        relay(url) as owner,
        relay(url) as elsewhere,
        relay(url, token=OTHER) as bob,
    ):
        async with owner.stream([Message.user("go")]) as stream:
            tap.give("a ")
            first = await stream.__anext__()
            run_id = stream.run_id  # type: ignore[attr-defined]
            async with elsewhere.watch(run_id) as followed:
                assert (await followed.__anext__()).text == "a "
                tap.give("b ")
                tap.end()
                rest = [delta.text async for delta in followed]
            mine = [first.text, *[delta.text async for delta in stream]]
        with pytest.raises(ProviderError) as refused:
            await watched(bob, run_id)
        async with elsewhere.watch(run_id, after=1) as later:
            tail = [delta.text async for delta in later]
    assert ["a ", *rest] == mine
    assert "".join(mine) == "a b "
    assert followed.result == stream.result
    assert refused.value.code == "unknown_run"
    assert "".join(tail) == "b "
    assert tap.calls == 1


async def test_relay_provider_reports_a_gap_it_cannot_fill() -> None:
    up = Upstream()
    app = server(up, limits=RelayLimits(run_events=3))
    async with running(app) as url, relay(url) as model:
        async with model.stream([Message.user("one two three four five")]) as stream:
            words = [delta.text async for delta in stream]
        with pytest.raises(ProviderError) as gap:
            await watched(model, stream.run_id)  # type: ignore[attr-defined]
    assert "".join(words) == "one two three four five "
    assert (gap.value.code, gap.value.retryable) == ("gap", False)


async def test_relay_provider_leaving_a_stream_that_outlives_cancels_the_run() -> None:
    tap = Tap()
    app = server(tap)
    async with running(app) as url, relay(url, cancel_on_disconnect=False) as model:
        async with model.stream([Message.user("go")]) as stream:
            tap.give("x")
            await stream.__anext__()
        await until(lambda: tap.closed == 1)
    assert tap.finished == 0


class OldRelay:
    """A relay of version 2, as far as a client can tell: it refuses a hello of version 3
    and decodes frames strictly -- ``cancel_on_disconnect`` is an unknown field to it."""

    def __init__(self) -> None:
        self.hellos: list[int] = []
        self.frames: list[dict[str, Any]] = []

    async def __call__(self, request: Any) -> None:
        import trio_websocket

        socket = await request.accept()
        try:
            said = json.loads(await socket.get_message())
            self.hellos.append(said["version"])
            if said["version"] > 2:
                await socket.send_message(encode_frame(error_frame("version")))
                await socket.aclose(1008)
                return
            await socket.send_message(encode_frame(ReadyFrame(2, 1 << 20, 16)))
            while True:
                frame = json.loads(await socket.get_message())
                self.frames.append(frame)
                if "cancel_on_disconnect" in frame:
                    await socket.send_message(encode_frame(error_frame("invalid")))
                    await socket.aclose(1008)
                    return
                answer = ResultFrame(frame["id"], ProviderResult(content="old"))
                await socket.send_message(encode_frame(answer))
        except trio_websocket.ConnectionClosed:
            pass


async def test_relay_provider_asks_an_older_relay_for_nothing_it_cannot_do() -> None:
    import trio_websocket

    old = OldRelay()
    async with trio.open_nursery() as nursery:
        listener = await nursery.start(
            functools.partial(trio_websocket.serve_websocket, old, "127.0.0.1", 0, ssl_context=None)
        )
        url = f"ws://127.0.0.1:{listener.port}/v1/relay"
        async with RelayProvider(url, token=TOKEN, cancel_on_disconnect=False) as model:
            async with model.stream([Message.user("hi")]) as stream:
                texts = [delta.text async for delta in stream]
            assert stream.result.content == "old"
            assert stream.run_id is None  # type: ignore[attr-defined]
            with pytest.raises(ProviderError) as refused:
                await watched(model, "run_abc")
        nursery.cancel_scope.cancel()
    assert texts == []
    assert old.hellos == [3, 2]
    assert ["cancel_on_disconnect" in frame for frame in old.frames] == [False]
    assert refused.value.code == "version"


# -- HTTP: the NDJSON answer ---------------------------------------------------------------------


async def test_an_ndjson_answer_names_its_run_and_version_3_numbers_its_lines() -> None:
    up = Upstream()
    app = server(up)
    body = {"messages": [{"role": "user", "content": "one two"}]}
    async with running(app) as url, httpx.AsyncClient() as client:
        old = await client.post(f"{url}/v1/stream", json=body, headers=bearer())
        new = await client.post(f"{url}/v1/stream", json={**body, "version": 3}, headers=bearer())
    old_frames = [decode_server_frame(line) for line in old.text.splitlines()]
    new_frames = [decode_server_frame(line) for line in new.text.splitlines()]
    assert [type(f) for f in old_frames] == [DeltaFrame, DeltaFrame, ResultFrame]
    assert seqs_of(old_frames) == []  # as before
    assert RUN_ID.fullmatch(old.headers[RUN_ID_HEADER])
    assert new_frames[0] == RunFrame("http", new.headers[RUN_ID_HEADER])
    assert [type(f) for f in new_frames[1:]] == [DeltaFrame, DeltaFrame, ResultFrame]
    assert seqs_of(new_frames) == sorted(set(seqs_of(new_frames)))
    assert new.headers[TAIL_INDEX_HEADER] == "0"  # the body comes after seq 0: from the start


async def test_an_http_run_that_outlives_its_client_is_followed_as_server_sent_events() -> None:
    tap = Tap()
    app = server(tap)
    body = {
        "messages": [{"role": "user", "content": "go"}],
        "version": 3,
        "cancel_on_disconnect": False,
    }
    async with running(app) as url, httpx.AsyncClient() as client:
        async with client.stream("POST", f"{url}/v1/stream", json=body, headers=bearer()) as r:
            lines = r.aiter_lines()
            run = decode_server_frame(await lines.__anext__())
            assert isinstance(run, RunFrame)
            assert r.headers[RUN_ID_HEADER] == run.run_id
            tap.give("one ")
            first = decode_server_frame(await lines.__anext__())
            assert isinstance(first, DeltaFrame)
        # The client left: the run goes on.
        tap.give("two ", "three ")
        tap.end()
        response, items = await sse(client, url, run.run_id, params={"after": first.seq})
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers[TAIL_INDEX_HEADER] == str(first.seq)
    events = events_of(items)
    assert first.text + text_in(events) == "one two three "
    assert events[-1].kind == "finished"  # and the stream stopped after it
    assert events[-1].data["response"]["content"] == "one two three "
    assert [e.kind for e in events].count("usage") == 1


async def test_server_sent_events_resume_from_last_event_id_and_keep_alive() -> None:
    tap = Tap()
    app = server(tap, limits=RelayLimits(keepalive=5))
    async with (
        running(app) as url,
        speaking(url) as raw,
        httpx.AsyncClient(timeout=600) as client,
    ):
        await raw.send(start("a", "go"))
        run = await raw.frame()
        assert isinstance(run, RunFrame)
        tap.give("one ", "two ")
        await until(lambda: app._runs.find(run.run_id, app._holders[0][1]).last == 2)  # type: ignore[union-attr]
        items: list[SSEEvent | SSEComment] = []
        decoder = SSEDecoder()
        # A browser's EventSource reconnects to its first URL, with Last-Event-ID: the header wins.
        headers = {**bearer(), "last-event-id": "1"}
        async with client.stream(
            "GET", f"{url}/v1/runs/{run.run_id}/events?after=0", headers=headers
        ) as response:
            chunks = response.aiter_bytes()
            while not any(isinstance(i, SSEComment) for i in items):
                items.extend(decoder.feed(await chunks.__anext__()))  # quiet: a keep-alive
            tap.give("three ")
            tap.end()
            async for chunk in chunks:
                items.extend(decoder.feed(chunk))
        again = await client.get(
            f"{url}/v1/runs/{run.run_id}/events", headers={**bearer(), "last-event-id": "99"}
        )
        ended = await client.get(
            f"{url}/v1/runs/{run.run_id}/events",
            headers={**bearer(), "last-event-id": str(events_of(items)[-1].seq)},
        )
        bad = await client.get(
            f"{url}/v1/runs/{run.run_id}/events", headers={**bearer(), "last-event-id": "x"}
        )
        wrong_method = await client.post(f"{url}/v1/runs/{run.run_id}/events", headers=bearer())
    events = events_of(items)
    assert text_in(events) == "two three "  # after seq 1
    assert events[0].seq == 2
    assert items.index(SSEComment("keep-alive")) < len(items) - 1
    assert again.status_code == 400  # a seq the run never had
    assert ended.status_code == 204  # after its terminal event: nothing (an EventSource stops)
    assert bad.status_code == 400
    assert (wrong_method.status_code, wrong_method.headers["allow"]) == (405, "GET")


async def test_a_follower_behind_the_log_gets_a_gap_event() -> None:
    up = Upstream()
    app = server(up, limits=RelayLimits(run_events=4))
    async with running(app) as url, speaking(url) as raw, httpx.AsyncClient() as client:
        await raw.send(start("a", "a b c d e f g"))
        run_id = (await until_frames(raw, "a"))[0].run_id  # type: ignore[union-attr]
        _, items = await sse(client, url, run_id)
    events = events_of(items)
    assert events[0].kind == "gap"
    assert events[0].data == {"first": 1}
    assert [e.seq for e in events] == list(range(events[0].seq, events[-1].seq + 1))
    assert events[-1].kind == "finished"


# -- HTTP: polling (002's continuation rule) -----------------------------------------------------


async def test_a_polling_client_gets_every_event_once_with_gaps_and_a_tail_index() -> None:
    tap = Tap()
    app = server(tap, limits=RelayLimits(poll_events=2))
    async with running(app) as url, speaking(url) as raw, httpx.AsyncClient() as client:
        await raw.send(start("a", "go"))
        run = await raw.frame()
        assert isinstance(run, RunFrame)
        cursor = RunContinuation(run.run_id, limit=50)
        got: list[RunEvent] = []
        gaps = 0
        answers: list[httpx.Response] = []
        while not cursor.done:
            answer = await client.get(
                f"{url}/v1/runs/{run.run_id}/events", params=cursor.query(), headers=bearer()
            )
            assert answer.status_code == 200
            answers.append(answer)
            events = [event_from_json(json.loads(line)) for line in answer.text.splitlines()]
            got.extend(cursor.feed(events, tail_index=int(answer.headers[TAIL_INDEX_HEADER])))
            if cursor.polling_gap:
                gaps += 1
                # Feed the run only when the client found nothing new: a gap, then news.
                if gaps <= 3:
                    tap.give(f"{gaps} ", f"{gaps}b ")
                else:
                    tap.end()
        json_answer = await client.get(
            f"{url}/v1/runs/{run.run_id}/events",
            params={"startIndex": "0"},
            headers={**bearer(), "accept": "application/json"},
        )
    assert text_in(got) == "1 1b 2 2b 3 3b "
    assert [e.seq for e in got] == list(range(1, len(got) + 1))
    assert got[-1].kind == "finished"
    assert gaps >= 4
    assert answers[0].headers[RUN_STATE_HEADER] == "running"
    assert answers[-1].headers[RUN_STATE_HEADER] == "ended"
    assert all(len(a.text.splitlines()) <= 2 for a in answers)  # poll_events
    document = json_answer.json()
    assert (document["run_id"], document["tail_index"], document["state"]) == (
        run.run_id,
        0,
        "ended",
    )
    assert [event_from_json(e) for e in document["events"]] == got[:2]


async def test_a_poll_may_wait_for_the_next_event_and_bad_queries_are_refused() -> None:
    tap = Tap()
    app = server(tap, limits=RelayLimits(poll_wait=30))
    async with (
        running(app) as url,
        speaking(url) as raw,
        httpx.AsyncClient(timeout=600) as client,
    ):
        await raw.send(start("a", "go"))
        run = await raw.frame()
        assert isinstance(run, RunFrame)
        path = f"{url}/v1/runs/{run.run_id}/events"
        began = trio.current_time()
        empty = await client.get(path, params={"startIndex": "0", "wait": "10"}, headers=bearer())
        waited = trio.current_time() - began
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_feed_later, tap)
            news = await client.get(
                path, params={"startIndex": "0", "wait": "100"}, headers=bearer()
            )
        statuses = []
        for query in (
            {"startIndex": "-1"},
            {"startIndex": "1.5"},
            {"startIndex": "9"},  # a seq the run never had
            {"startIndex": "0", "wait": "soon"},
            {"startIndex": "0", "limit": "0"},
        ):
            statuses.append((await client.get(path, params=query, headers=bearer())).status_code)
        tap.end()
    assert empty.status_code == 200
    assert empty.text == ""  # a polling gap
    assert 10 <= waited < 12
    assert [json.loads(line)["data"]["text"] for line in news.text.splitlines()] == ["late"]
    assert statuses == [400, 400, 400, 400, 400]


async def _feed_later(tap: Tap) -> None:
    await trio.sleep(5)
    tap.give("late")


async def test_a_run_is_cancelled_over_http_by_its_token() -> None:
    tap = Tap()
    app = server(tap)
    async with running(app) as url, speaking(url) as raw, httpx.AsyncClient() as client:
        await raw.send(start("a", "go"))
        run = await raw.frame()
        assert isinstance(run, RunFrame)
        tap.give("half")
        await raw.frame()
        cancelled = await client.post(f"{url}/v1/runs/{run.run_id}/cancel", headers=bearer())
        frames = await until_frames(raw, "a")
        again = await client.post(f"{url}/v1/runs/{run.run_id}/cancel", headers=bearer())
        wrong = await client.get(f"{url}/v1/runs/{run.run_id}/cancel", headers=bearer())
        unknown = await client.get(f"{url}/v1/runs/{run.run_id}/other", headers=bearer())
    assert cancelled.status_code == 202
    assert cancelled.headers[RUN_ID_HEADER] == run.run_id
    assert isinstance(frames[-1], AbortFrame)
    assert frames[-1].partial.content == "half"
    assert again.status_code == 409  # it had ended
    assert (wrong.status_code, wrong.headers["allow"]) == (405, "POST")
    assert unknown.status_code == 404


async def test_closing_the_relay_ends_a_detached_run_and_its_followers_hear_why() -> None:
    tap = Tap()
    app = server(tap)
    async with running(app) as url, httpx.AsyncClient() as client:
        async with speaking(url) as owner:
            await owner.send(start("a", "go", outlive=True))
            run = await owner.frame()
            assert isinstance(run, RunFrame)
            await owner.abort()
        tap.give("x")
        async with trio.open_nursery() as nursery:
            followed: list[tuple[httpx.Response, list[SSEEvent | SSEComment]]] = []

            async def follow() -> None:
                followed.append(await sse(client, url, run.run_id))

            nursery.start_soon(follow)
            await until(lambda: app.statistics().watchers == 1)
            app.close()
    ((_, items),) = followed
    events = events_of(items)
    assert text_in(events) == "x"
    assert events[-1].kind == "failed"
    assert events[-1].data["error"]["code"] == "shutdown"
    await until(lambda: tap.closed == 1)
