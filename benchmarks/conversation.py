"""Benchmark: a long conversation (appends, compaction, prompt ``build``) and the SQLite store.

Usage: ``python benchmarks/conversation.py [--quick] [--json]``

Scenarios, all in one ``trio.run``:

* ``build``: 10,000 messages (``--quick``: 2,000) appended one at a time to a real
  ``Conversation`` actor (``open_runtime()``, ``Conversation.start``) with compaction on: whenever
  more than 60 messages are live, ``compact()`` folds all but the last 20 (``keep=20``) into a
  section, with a sections cap of 8, using a cheap deterministic async summarizer (a short string
  from the first words of its input: this measures ``build``, not summarizing). After every append
  (and any compaction) the script takes ``await conversation.view()`` and times
  ``protocols.context.build(view, system=..., instructions=..., files=..., scope=...)`` on it, with
  a realistic context: a system prompt, three instructions, a workspace of two text files. The
  messages are seeded and realistic: user and assistant text of a few hundred characters, some
  assistant tool calls answered by tool results.

  ``build_us_at_10k_over_at_1k`` is the median ``build()`` time per call on the views of the 200
  appends ending at the 10,000th message divided by the same on the views of the 200 ending at the
  1,000th (``--quick``: the 100 ending at the 2,000th and at the 200th, under the same names). A
  window spans five compaction cycles (one every 40 appends; ``--quick``: two and a half), so both
  see the live tail at every length alike. The views of both windows are kept, and once the 10,000
  appends are done (the conversation still held, so the heap is as large as at the end) each is
  built again five times, an early and a late view alternately, call by call: the two windows of
  the append loop are seconds apart, and a slow spell of a shared machine (seen here to slow
  everything by 1.6x for up to a second) could otherwise hit one window only. The times taken
  inside the loop are reported too, for information, as are the time of
  ``await conversation.view()`` and of ``await conversation.add(message)`` at the same two points,
  and of the pure ``History.add`` of one message to a history of 1,000 and of 10,000 messages
  (``History`` checks that ids are unique across the whole conversation on every change).
* ``save``: ``await store.set(snapshot)`` of a 1,000-message conversation (the same kind of
  messages, taken with ``await conversation.snapshot()``) on a ``SQLiteConversationStore`` in a
  temp dir, the same id overwritten each time. The floor it is compared with is the least a
  program can do to save the same data to a file: stdlib ``json.dumps`` of the plain data
  (``protocols.codec.to_json`` of the snapshot, done once beforehand, so the codec's own work
  counts against the store; the text is checked to be the very text the store writes), written
  to a file that is then closed -- without ``fsync``, since the store's default
  (``synchronous=NORMAL`` in WAL mode) does not sync on commit either. For information: the store
  opened with ``durable=True`` (``synchronous=FULL``) against the floor plus ``os.fsync``, the
  mean save time (a WAL checkpoint, which syncs, lands on some saves), and the time of
  ``protocols.codec.encode`` alone (part of what ``set`` does) and of its parts: ``to_json``,
  ``check_json`` of the plain data and ``json.dumps``.

Correctness is checked, not assumed: each round's conversation holds all its messages, in order
(the sections' originals, then the live tail), with at most 8 sections; every 97th prompt is checked
to be the system message followed by the view; the stored snapshot reads back equal, also from a
freshly opened store.

Results are medians over several rounds. In ``save`` the runs of a round follow each other
(their order reversing every other round), the store's save always next to the floor's, and
``save_time_vs_plain_file`` is the median over rounds of the ratio of the two, so a slow spell
of the machine hits both alike (the ratio of the two medians is reported too). With ``--json``
the last line printed is one JSON object ``{"metrics": {...}, "ratios": {...}}``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# ``benchmarks/actors.py`` shares its name with the ``actors`` package, and a script's own
# directory comes first on ``sys.path``: put the repository root (where the package lives) first.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gc
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from actors import Conversation, open_runtime
from actors.store import SQLiteConversationStore
from benchmarks._common import run_main
from protocols.codec import check_json, encode, to_json
from protocols.context import Instruction, Instructions, Scope, build
from protocols.history import ConversationSnapshot, History
from protocols.messages import Message, Role, ToolCall
from protocols.workspace import File, Workspace

SEED = 20240705
#: Messages appended (quick, full), and the earlier point measured (the metric names say 1k
#: and 10k in both modes).
APPENDS = (2_000, 10_000)
EARLY = (200, 1_000)
#: Appends per measuring window, ending at each point.
WINDOW = (100, 200)
#: Whole append runs (quick, full); each is a fresh conversation.
BUILD_ROUNDS = (3, 5)
#: How many times each view of both windows is built again, alternately, after a run.
RETIME_REPEATS = 5
#: Compaction: compact when more than ``COMPACT_AT`` messages are live, keeping ``KEEP``, with a
#: cap of ``SECTIONS_CAP`` sections.
COMPACT_AT = 60
KEEP = 20
SECTIONS_CAP = 8
#: Messages in the saved conversation, and timed saves (quick, full).
SAVE_MESSAGES = 1_000
SAVE_ROUNDS = (15, 61)

#: The prose the messages' words are drawn from.
_PROSE = (
    "the function returns a list of records from the database and the caller filters them by "
    "date before it writes the report to disk so we should check whether the cache is stale "
    "when the user changes the configuration file or the schema version moves forward again "
    "which means every test that reads fixtures needs an update and a short note in the docs "
    "about migrations retries timeouts and the error codes clients can expect to handle"
)
_WORDS = tuple(_PROSE.split())

_TOOLS = ("read_file", "search", "run_tests", "write_file")

SYSTEM_PROMPT = (
    "You are a careful software engineer working in the user's repository. Read the relevant "
    "files before you change them, keep changes small and reviewable, and explain what you did "
    "and why in a few sentences. When a tool fails, say so plainly and suggest the next step. "
    "Never invent file contents, test results or command output: use the tools to find out. "
    "Prefer the project's existing style and helpers over new dependencies."
)

INSTRUCTIONS = Instructions(
    (
        Instruction(
            "style",
            "Answer in plain English. Use short paragraphs and code blocks for code.",
            priority=1,
        ),
        Instruction(
            "safety",
            "Do not run commands that delete files outside the workspace or touch the network.",
            priority=10,
        ),
        Instruction(
            "tests",
            "After every change, run the tests that cover it and report the result.",
        ),
    )
)

NOTES = "\n".join(
    [
        "# Release notes",
        "",
        *(
            f"- {i}: the report writer now {' '.join(_WORDS[i % 40 : i % 40 + 9])}."
            for i in range(24)
        ),
    ]
)

SOURCE = "\n".join(
    [
        '"""The report writer."""',
        "",
        "from __future__ import annotations",
        "",
        "import json",
        "from pathlib import Path",
        "",
        "",
        *(
            line
            for i in range(12)
            for line in (
                f"def step_{i}(records: list[dict[str, object]], out: Path) -> int:",
                f'    """Write records whose day is {i} to ``out``; return how many."""',
                f'    chosen = [r for r in records if r.get("day") == {i}]',
                '    out.write_text(json.dumps(chosen), encoding="utf-8")',
                "    return len(chosen)",
                "",
                "",
            )
        ),
    ]
)


def workspace() -> Workspace:
    """A small workspace: two text files (a Markdown note and a Python module)."""
    return Workspace(
        "bench-workspace", (File.text("notes.md", NOTES), File.text("src/report.py", SOURCE))
    )


# -- messages ------------------------------------------------------------------------------------


def text(rng: random.Random, low: int, high: int) -> str:
    """Seeded words, between ``low`` and about ``high`` characters."""
    target = rng.randint(low, high)
    words: list[str] = []
    length = 0
    while length < target:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words).capitalize() + "."


def conversation_messages(n: int, rng: random.Random) -> list[Message]:
    """``n`` messages of a realistic exchange: turns of a user message, sometimes an assistant
    tool call answered by a tool result, then an assistant answer. The last turn may be cut
    short (a call left unanswered, as when a conversation is taken mid-turn)."""
    messages: list[Message] = []
    stamp = 1_720_000_000.0
    turn = 0
    while len(messages) < n:
        stamp += 30.0
        messages.append(Message.user(text(rng, 150, 450), created_at=stamp))
        if rng.random() < 0.3:
            name = rng.choice(_TOOLS)
            call = ToolCall(
                f"call_{turn}",
                name,
                {"path": f"src/module_{rng.randint(1, 40)}.py", "query": rng.choice(_WORDS)},
            )
            messages.append(
                Message.assistant(text(rng, 20, 80), calls=[call], created_at=stamp + 5)
            )
            messages.append(Message.tool(call.id, name, text(rng, 100, 500), created_at=stamp + 6))
        messages.append(Message.assistant(text(rng, 200, 800), created_at=stamp + 10))
        turn += 1
    return messages[:n]


async def summarize(messages: Sequence[Message]) -> str:
    """A cheap deterministic summarizer: how many messages, and the first words of the first."""
    first = messages[0].content[:60] if messages else ""
    return f"{len(messages)} messages, starting: {first}"


# -- build ---------------------------------------------------------------------------------------


def check_prompt(prompt: tuple[Message, ...], view: tuple[Message, ...]) -> None:
    """Fail loudly unless ``prompt`` is the system message followed by ``view``."""
    head = prompt[0]
    if head.role is not Role.SYSTEM or "## Workspace" not in head.content:
        raise SystemExit("build: the prompt does not start with the system message")
    if len(prompt) != len(view) + 1 or prompt[-1].id != view[-1].id:
        raise SystemExit("build: the prompt does not hold the view")


def build_prompt(
    view: tuple[Message, ...], files: tuple[File, ...], scope: Scope
) -> tuple[Message, ...]:
    """The prompt of the next call: ``build`` with the benchmark's context."""
    return build(view, system=SYSTEM_PROMPT, instructions=INSTRUCTIONS, files=files, scope=scope)


def retime_builds(
    early: list[tuple[Message, ...]],
    late: list[tuple[Message, ...]],
    files: tuple[File, ...],
    scope: Scope,
    repeats: int,
) -> tuple[float, float]:
    """The median time of ``build`` on the ``early`` and on the ``late`` views, the two timed
    alternately, call by call (which goes first swaps every repeat)."""
    samples: tuple[list[float], list[float]] = ([], [])
    for repeat in range(repeats):
        for pair in zip(early, late, strict=True):
            for side in (0, 1) if repeat % 2 == 0 else (1, 0):
                start = time.perf_counter()
                build_prompt(pair[side], files, scope)
                samples[side].append(time.perf_counter() - start)
    return statistics.median(samples[0]), statistics.median(samples[1])


async def append_run(
    messages: list[Message], files: tuple[File, ...], scope: Scope, early: int, size: int
) -> dict[str, float]:
    """Append ``messages`` one by one to a fresh conversation, compacting as configured, and
    build the prompt after each. Return, for the windows of ``size`` appends ending at the
    ``early``-th and at the last message: the median times (seconds) of ``add``, ``view`` and
    ``build`` in the loop, of ``build`` timed again on the same views alternately (while the
    conversation is still held), and the mean view lengths; and the number of compactions.
    Checks that the conversation holds every message at the end."""
    n = len(messages)
    times: dict[str, list[float]] = {"add": [], "view": [], "build_loop": [], "view_length": []}
    views: dict[str, list[tuple[Message, ...]]] = {"early": [], "late": []}
    compactions = 0
    gc.collect()
    async with open_runtime() as rt:
        conversation = await Conversation.start(
            rt, summarize=summarize, keep=KEEP, sections=SECTIONS_CAP
        )
        live = 0
        for count, message in enumerate(messages, 1):
            start = time.perf_counter()
            await conversation.add(message)
            added = time.perf_counter()
            live += 1
            if live > COMPACT_AT:
                if await conversation.compact() is not None:
                    compactions += 1
                live = len(await conversation.messages())
            start_view = time.perf_counter()
            view = await conversation.view()
            start_build = time.perf_counter()
            prompt = build_prompt(view, files, scope)
            built = time.perf_counter()
            times["add"].append(added - start)
            times["view"].append(start_build - start_view)
            times["build_loop"].append(built - start_build)
            times["view_length"].append(len(view))
            if count % 97 == 0:
                check_prompt(prompt, view)
            if early - size < count <= early:
                views["early"].append(view)
            if n - size < count:
                views["late"].append(view)
        history = await conversation.history()
        result = dict(
            zip(
                ("build_early", "build_late"),
                retime_builds(views["early"], views["late"], files, scope, RETIME_REPEATS),
                strict=True,
            )
        )
        await conversation.stop()
    held = [m.id for section in history.sections for m in section.messages]
    held.extend(m.id for m in history.messages)
    if held != [m.id for m in messages]:
        raise SystemExit(
            f"build: the conversation holds {len(held)} messages, not the {n} added in order"
        )
    if len(history.sections) > SECTIONS_CAP or compactions == 0:
        raise SystemExit(f"build: {len(history.sections)} sections after {compactions} compactions")
    for name, samples in times.items():
        aggregate = statistics.mean if name == "view_length" else statistics.median
        result[f"{name}_early"] = aggregate(samples[early - size : early])
        result[f"{name}_late"] = aggregate(samples[n - size : n])
    result["compactions"] = compactions
    return result


def history_add_times(
    small: list[Message], large: list[Message], extra: Message, rounds: int = 200
) -> tuple[float, float]:
    """The median time of the pure ``History.add`` of one message to a history holding
    ``small`` and to one holding ``large`` (all live), timed alternately."""
    histories = (
        History(id="bench-small", messages=small),
        History(id="bench-large", messages=large),
    )
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(rounds):
        for side, history in enumerate(histories):
            start = time.perf_counter()
            history.add((extra,))
            samples[side].append(time.perf_counter() - start)
    return statistics.median(samples[0]), statistics.median(samples[1])


async def bench_build(quick: bool) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """Run the ``build`` scenario; return its metrics, ratios and lines."""
    mode = 0 if quick else 1
    n, early, size = APPENDS[mode], EARLY[mode], WINDOW[mode]
    messages = conversation_messages(n, random.Random(SEED))
    files = workspace().files()
    scope = Scope("bench", files=[file.path for file in files])
    await append_run(messages[: early + size], files, scope, early, size)  # warm up
    rounds = [
        await append_run(messages, files, scope, early, size) for _ in range(BUILD_ROUNDS[mode])
    ]
    med = {key: statistics.median(run[key] for run in rounds) for key in rounds[0]}
    compactions = med["compactions"]
    view_lengths = {"early": med["view_length_early"], "late": med["view_length_late"]}

    extra = Message.user("one more", created_at=1_800_000_000.0)
    pure_early, pure_late = history_add_times(messages[:early], messages, extra)

    us = 1e6
    metrics: dict[str, float] = {
        "messages_appended": n,
        "early_at_messages": early,
        "window_appends": size,
        "compactions": compactions,
        "build_us_at_1k": med["build_early"] * us,
        "build_us_at_10k": med["build_late"] * us,
        "build_in_loop_us_at_1k": med["build_loop_early"] * us,
        "build_in_loop_us_at_10k": med["build_loop_late"] * us,
        "view_us_at_1k": med["view_early"] * us,
        "view_us_at_10k": med["view_late"] * us,
        "append_us_at_1k": med["add_early"] * us,
        "append_us_at_10k": med["add_late"] * us,
        "history_add_us_at_1k": pure_early * us,
        "history_add_us_at_10k": pure_late * us,
        "view_messages_at_1k": view_lengths["early"],
        "view_messages_at_10k": view_lengths["late"],
    }
    ratios = {
        "build_us_at_10k_over_at_1k": med["build_late"] / med["build_early"],
        "build_in_loop_us_at_10k_over_at_1k": med["build_loop_late"] / med["build_loop_early"],
        "view_us_at_10k_over_at_1k": med["view_late"] / med["view_early"],
        "append_us_at_10k_over_at_1k": med["add_late"] / med["add_early"],
        "history_add_us_at_10k_over_at_1k": pure_late / pure_early,
    }
    lines = [
        f"build: {metrics['build_us_at_10k']:.1f} us per call at message {n:,} vs "
        f"{metrics['build_us_at_1k']:.1f} us at message {early:,} "
        f"({ratios['build_us_at_10k_over_at_1k']:.2f}x; target <= 1.5; compaction on: "
        f"keep {KEEP}, at {COMPACT_AT} live, cap {SECTIONS_CAP} sections; "
        f"{compactions:.0f} compactions; the views of both windows built alternately)",
        f"build as timed in the append loop: {metrics['build_in_loop_us_at_10k']:.1f} us at "
        f"{n:,} vs {metrics['build_in_loop_us_at_1k']:.1f} us at {early:,} "
        f"({ratios['build_in_loop_us_at_10k_over_at_1k']:.2f}x; the two windows are seconds "
        "apart, so a slow spell of the machine may hit one only)",
        f"view: {view_lengths['late']:.1f} messages on average at {n:,} vs "
        f"{view_lengths['early']:.1f} at {early:,}",
        f"await conversation.view(): {metrics['view_us_at_10k']:.1f} us at {n:,} vs "
        f"{metrics['view_us_at_1k']:.1f} us at {early:,} "
        f"({ratios['view_us_at_10k_over_at_1k']:.2f}x)",
        f"await conversation.add(message): {metrics['append_us_at_10k']:.1f} us at {n:,} vs "
        f"{metrics['append_us_at_1k']:.1f} us at {early:,} "
        f"({ratios['append_us_at_10k_over_at_1k']:.2f}x)",
        f"History.add of one message (pure, no compaction: the whole tail is live and copied): "
        f"{metrics['history_add_us_at_10k']:.1f} us on {n:,} messages vs "
        f"{metrics['history_add_us_at_1k']:.1f} us on {early:,} "
        f"({ratios['history_add_us_at_10k_over_at_1k']:.2f}x)",
    ]
    return metrics, ratios, lines


# -- save ----------------------------------------------------------------------------------------


def plain_text(plain: Any) -> str:
    """Stdlib ``json.dumps`` of plain data, in the store's compact form."""
    return json.dumps(plain, ensure_ascii=False, separators=(",", ":"))


def write_plain(plain: Any, path: Path, *, sync: bool) -> None:
    """The floor: ``json.dumps``, write the text to ``path``, (``fsync``,) close."""
    with path.open("w", encoding="utf-8") as file:
        file.write(plain_text(plain))
        if sync:
            file.flush()
            os.fsync(file.fileno())


async def timed_rounds(
    runs: dict[str, Callable[[], Awaitable[None]]], rounds: int
) -> dict[str, list[float]]:
    """The wall times of each run in ``rounds`` rounds, after one untimed round. The runs follow
    each other in a round, their order reversing every other round, so neighbours in ``runs``
    always run back to back."""
    for run in runs.values():
        await run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    order = list(runs)
    for round_ in range(rounds):
        for name in order if round_ % 2 == 0 else reversed(order):
            gc.collect()
            start = time.perf_counter()
            await runs[name]()
            times[name].append(time.perf_counter() - start)
    return times


def paired_ratio(times: dict[str, list[float]], ours: str, floor: str) -> float:
    """The median over rounds of ``ours``' time over ``floor``'s time in the same round."""
    return statistics.median(a / b for a, b in zip(times[ours], times[floor], strict=True))


async def saved_snapshot() -> ConversationSnapshot:
    """A 1,000-message conversation's snapshot, taken from a real conversation."""
    messages = conversation_messages(SAVE_MESSAGES, random.Random(SEED + 1))
    async with open_runtime() as rt:
        conversation = await Conversation.start(rt, id="bench-saved-conversation")
        await conversation.add(messages)
        snapshot = await conversation.snapshot()
        await conversation.stop()
    if len(snapshot.messages) != SAVE_MESSAGES:
        raise SystemExit(f"save: the snapshot holds {len(snapshot.messages)} messages")
    return snapshot


async def bench_save(quick: bool) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """Run the ``save`` scenario; return its metrics, ratios and lines."""
    rounds = SAVE_ROUNDS[0 if quick else 1]
    snapshot = await saved_snapshot()
    plain = to_json(snapshot)
    stored_text = encode(snapshot)
    if plain_text(plain) != stored_text:
        raise SystemExit("save: json.dumps of the plain data differs from what the store writes")

    async def run_encode() -> None:
        encode(snapshot)

    async def run_to_json() -> None:
        to_json(snapshot)

    async def run_check_json() -> None:
        check_json(plain)

    async def run_dumps() -> None:
        plain_text(plain)

    with tempfile.TemporaryDirectory(prefix="bench-conversation-") as tmp:
        directory = Path(tmp)
        plain_path = directory / "snapshot.json"
        synced_path = directory / "snapshot-synced.json"
        store = await SQLiteConversationStore.open(directory / "store.db")
        durable = await SQLiteConversationStore.open(directory / "durable.db", durable=True)
        try:

            async def run_store() -> None:
                await store.set(snapshot)

            async def run_durable() -> None:
                await durable.set(snapshot)

            async def run_plain() -> None:
                write_plain(plain, plain_path, sync=False)

            async def run_plain_fsync() -> None:
                write_plain(plain, synced_path, sync=True)

            times = await timed_rounds(
                {
                    "store": run_store,
                    "plain": run_plain,
                    "durable": run_durable,
                    "plain_fsync": run_plain_fsync,
                    "encode": run_encode,
                    "to_json": run_to_json,
                    "check_json": run_check_json,
                    "dumps": run_dumps,
                },
                rounds,
            )
            if await store.get(snapshot.id) != snapshot:
                raise SystemExit("save: the stored snapshot reads back different")
            if await durable.get(snapshot.id) != snapshot:
                raise SystemExit("save: the durable store's snapshot reads back different")
        finally:
            await store.aclose()
            await durable.aclose()
        async with await SQLiteConversationStore.open(directory / "store.db") as reopened:
            if await reopened.get(snapshot.id) != snapshot:
                raise SystemExit("save: the snapshot reads back different from a fresh store")
            if await reopened.list() != [snapshot.id]:
                raise SystemExit("save: the store holds other rows than the one overwritten")
        if plain_path.read_text(encoding="utf-8") != stored_text:
            raise SystemExit("save: the plain file holds other text than the store")

    t = {name: statistics.median(samples) for name, samples in times.items()}
    ms = 1000.0
    size = len(stored_text.encode("utf-8"))
    metrics: dict[str, float] = {
        "save_messages": SAVE_MESSAGES,
        "snapshot_bytes": size,
        "save_ms": t["store"] * ms,
        "save_ms_mean": statistics.mean(times["store"]) * ms,
        "plain_file_ms": t["plain"] * ms,
        "encode_ms": t["encode"] * ms,
        "to_json_ms": t["to_json"] * ms,
        "check_json_ms": t["check_json"] * ms,
        "json_dumps_ms": t["dumps"] * ms,
        "durable_save_ms": t["durable"] * ms,
        "plain_file_fsync_ms": t["plain_fsync"] * ms,
    }
    ratios = {
        "save_time_vs_plain_file": paired_ratio(times, "store", "plain"),
        "save_ms_over_plain_file_ms": t["store"] / t["plain"],
        "durable_save_time_vs_plain_file_fsync": paired_ratio(times, "durable", "plain_fsync"),
    }
    lines = [
        f"save ({SAVE_MESSAGES:,} messages, {size / 1024:,.0f} KiB of JSON): "
        f"{metrics['save_ms']:.2f} ms ({ratios['save_time_vs_plain_file']:.2f}x vs json.dumps + "
        f"write + close {metrics['plain_file_ms']:.2f} ms; target <= 3; median of the ratios "
        f"of the rounds, the two run back to back; ratio of the medians "
        f"{ratios['save_ms_over_plain_file_ms']:.2f}x)",
        f"save: mean {metrics['save_ms_mean']:.2f} ms (WAL checkpoints, which sync, land on some "
        "saves)",
        f"save: protocols.codec.encode alone takes {metrics['encode_ms']:.2f} ms of it "
        f"(to_json {metrics['to_json_ms']:.2f} ms, check_json {metrics['check_json_ms']:.2f} ms, "
        f"json.dumps {metrics['json_dumps_ms']:.2f} ms); the rest, "
        f"{metrics['save_ms'] - metrics['encode_ms']:.2f} ms, is SQLite and the worker thread",
        f"save with durable=True: {metrics['durable_save_ms']:.2f} ms "
        f"({ratios['durable_save_time_vs_plain_file_fsync']:.2f}x vs json.dumps + write + fsync "
        f"{metrics['plain_file_fsync_ms']:.2f} ms)",
    ]
    return metrics, ratios, lines


# -- the benchmark -------------------------------------------------------------------------------


async def run(quick: bool) -> tuple[dict[str, float], dict[str, float], list[str]]:
    """Run every scenario; return the metrics, the ratios and the lines to print."""
    build_metrics, build_ratios, build_lines = await bench_build(quick)
    save_metrics, save_ratios, save_lines = await bench_save(quick)
    return (
        {**build_metrics, **save_metrics},
        {**build_ratios, **save_ratios},
        [*build_lines, *save_lines],
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its results; return the process exit status."""
    return run_main(run, argv, doc=__doc__, quick="fewer messages and rounds")


if __name__ == "__main__":
    raise SystemExit(main())
