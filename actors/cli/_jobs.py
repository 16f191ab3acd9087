"""``trio-agents worker`` and ``trio-agents jobs ...``: durable jobs from the command line.

``worker`` runs a job queue on a store until SIGINT or SIGTERM; ``jobs`` submits, shows, lists,
cancels, answers, purges, waits for and watches jobs, from any process, through the store alone.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import os
import signal
import sys
import time
import traceback
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple, TextIO

import trio

from actors.durable._open import check_store_url
from protocols._json import loads
from protocols.codec import from_json, to_json
from protocols.errors import AgentsError, ConfigError, ProtocolError, ValidationError
from protocols.messages import Message
from protocols.questions import Question, check_answer, parse_answer

if TYPE_CHECKING:
    from actors._runtime import Runtime
    from actors.durable import AgentRegistry, RunStore
    from protocols.jobs import JobRecord
    from protocols.live import RunEvent

__all__ = [
    "CANCELLED",
    "WAITING",
    "AppError",
    "call_app",
    "event_line",
    "jobs_main",
    "load_app",
    "read_input_json",
    "store_main",
    "worker_main",
]


async def _open(url: str, *, create: bool = True) -> RunStore:
    from actors._sqlite import StoreError  # noqa: PLC0415
    from actors.durable import open_run_store  # noqa: PLC0415

    try:
        return await open_run_store(url, create=create)
    except StoreError as error:
        if error.code != "missing":
            raise
        # A mistyped --store: say so, and what makes a store (this command never does).
        raise ConfigError(
            f"{error} -- check --store; a worker, jobs submit or store migrate creates a store"
        ) from None


class AppError(ConfigError):
    """What ``--app`` names could not be had: its module failed to import, or its function
    raised. ``error`` is what was raised (``--debug`` shows its traceback, alone)."""

    def __init__(self, spec: str, doing: str, error: BaseException) -> None:
        told = str(error) if isinstance(error, AgentsError) else _told(error)
        super().__init__(f"--app {spec}: {doing} failed: {told}{_where(error, spec)}")
        self.error = error


def _told(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _where(error: BaseException, spec: str) -> str:
    """`` (FILE, line N)``: the innermost line of the app's own code in ``error``'s traceback
    (a SyntaxError names its own)."""
    if isinstance(error, SyntaxError):
        return ""
    module = sys.modules.get(spec.partition(":")[0])
    found = getattr(module, "__file__", None) if module is not None else None
    if found is None:  # (a failed import leaves no module behind: ask where it would be)
        try:
            origin = importlib.util.find_spec(spec.partition(":")[0])
        except Exception:  # (its package's __init__ may fail again)
            origin = None
        found = origin.origin if origin is not None else None
    if not found:
        return ""
    home = os.path.dirname(os.path.abspath(found))
    for frame in reversed(traceback.extract_tb(error.__traceback__)):
        path = os.path.abspath(frame.filename)
        installed = {"site-packages", "dist-packages"} & set(path.split(os.sep))
        if os.path.commonpath([home, path]) == home and not installed:
            shown = os.path.relpath(path) if path.startswith(os.getcwd() + os.sep) else path
            return f" ({shown}, line {frame.lineno})"
    return ""


def load_app(spec: str) -> Any:
    """The object ``MODULE:ATTR`` names (the current directory is importable). Raises
    :class:`~protocols.errors.ConfigError` (:class:`AppError` when the module's code fails)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"--app takes MODULE:ATTR (for example myapp:registry), not {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if module_name != missing and not module_name.startswith(missing + "."):
            # The module was found, but something it imports was not.
            raise AppError(spec, f"importing {module_name}", error) from error
        raise ConfigError(f"cannot import {module_name!r} for --app: {error}") from None
    except (Exception, SystemExit) as error:  # its code raised, or it is no valid Python
        raise AppError(spec, f"importing {module_name}", error) from error
    target: Any = module
    for part in attr.split("."):
        try:
            found = hasattr(target, part)
        except Exception as error:  # a module's __getattr__, a property
            raise AppError(spec, f"reading {attr}", error) from error
        if not found:
            raise ConfigError(f"{module_name!r} has no {attr!r} for --app")
        target = getattr(target, part)
    return target


async def call_app(spec: str, function: Any, runtime: Runtime) -> Any:
    """What the function ``--app`` names returns: given the runtime when it takes an argument,
    awaited when it returns an awaitable. Whatever it raises is an :class:`AppError` (a
    cancellation, a Ctrl-C pass)."""
    name = getattr(function, "__qualname__", None) or type(function).__name__
    try:
        wants_runtime = len(inspect.signature(function).parameters) >= 1
        value = function(runtime) if wants_runtime else function()
        if inspect.isawaitable(value):
            value = await value
    except (Exception, SystemExit) as error:
        raise AppError(spec, f"calling {name}()", error) from error
    return value


async def _registry(spec: str, app: Any, runtime: Runtime) -> AgentRegistry:
    from actors.durable import AgentRegistry  # noqa: PLC0415

    value = app
    if not isinstance(value, AgentRegistry) and (
        inspect.isfunction(value) or inspect.ismethod(value)
    ):
        value = await call_app(spec, value, runtime)
    if not isinstance(value, AgentRegistry):
        raise ConfigError(
            "--app must name an AgentRegistry, or a function (taking the runtime, or nothing) "
            f"that returns one; it gave {type(value).__name__}"
        )
    return value


def worker_main(
    *,
    store: str,
    app: str,
    concurrency: int,
    lease: float,
    grace: float,
    poll: float,
    out: TextIO,
) -> int:
    """Run a worker until SIGINT or SIGTERM; then take no more jobs, give the running ones
    ``grace`` seconds to finish, cut the rest (their partials journaled; another worker
    continues them once their leases expire), and return 0."""
    target = load_app(app)
    check_store_url(store)  # a bad URL fails before anything starts
    settings = _Settings(concurrency, lease, grace, poll)
    return trio.run(_worker, store, (app, target), settings, out)


class _Settings(NamedTuple):
    concurrency: int
    lease: float
    grace: float
    poll: float


async def _worker(url: str, app: tuple[str, Any], settings: _Settings, out: TextIO) -> int:
    concurrency, lease, grace, poll = settings
    from actors._runtime import open_runtime  # noqa: PLC0415
    from actors.durable import open_job_queue  # noqa: PLC0415

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        store = await _open(url)
        try:
            async with open_runtime() as runtime:
                registry = await _registry(*app, runtime)
                async with open_job_queue(
                    store, registry, runtime, concurrency=concurrency, lease=lease, poll=poll
                ) as queue:
                    print(
                        f"trio-agents worker: {queue.owner} on {url} (agents: "
                        f"{', '.join(registry) or 'none'}; concurrency {concurrency}, lease "
                        f"{lease:g} s); Ctrl-C or SIGTERM to stop",
                        file=out,
                        flush=True,
                    )
                    waiting = await _leased_elsewhere(store, queue.owner, time.time())
                    if waiting:
                        print(_waiting_line(waiting, time.time()), file=out, flush=True)
                    async for signum in signals:
                        name = signal.Signals(signum).name
                        running = queue.statistics()["running"]
                        print(
                            f"trio-agents worker: {name}: taking no more jobs; {running} "
                            f"running get {grace:g} s to finish",
                            file=out,
                            flush=True,
                        )
                        queue.stop_taking()
                        with trio.move_on_after(grace):
                            await queue.wait_idle()
                        break
                    stats = queue.statistics()
                print(
                    "trio-agents worker: stopped ("
                    + ", ".join(f"{k} {v}" for k, v in stats.items() if v)
                    + ")",
                    file=out,
                    flush=True,
                )
        finally:
            with trio.CancelScope(shield=True):
                await store.aclose()
    return 0


async def _leased_elsewhere(store: RunStore, owner: str, now: float) -> list[JobRecord]:
    """The running jobs another worker than ``owner`` holds with a lease that has not expired
    at ``now`` -- a worker that died (a kill -9, a crash) holds its jobs until then."""
    from protocols.jobs import JobStatus  # noqa: PLC0415

    found: list[JobRecord] = []
    after: int | None = None
    while True:
        page = await store.list(statuses=[JobStatus.RUNNING], after=after, limit=500)
        found += [
            record
            for record in page
            if record.lease is not None and record.lease.owner != owner and record.lease.until > now
        ]
        if len(page) < 500:
            return found
        after = page[-1].sequence


def _waiting_line(waiting: list[JobRecord], now: float) -> str:
    """What a starting worker says of the jobs other workers hold (see _leased_elsewhere)."""
    until = max(record.lease.until for record in waiting if record.lease is not None)
    count = len(waiting)
    jobs, them, are = ("job", "it", "is") if count == 1 else ("jobs", "them", "are")
    latest = "" if count == 1 else "the last "
    return (
        f"trio-agents worker: waiting for {count} {jobs} whose lease has not yet expired "
        f"({latest}until {_when(until, now)}): another worker holds {them}; if it stopped "
        f"(killed, crashed), {them} {are} taken over then"
    )


def _when(moment: float, now: float) -> str:
    """``2025-01-02 12:00:30 (in 25 s)``: a wall-clock time, local, and how far it is."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment))
    gap = moment - now
    return f"{stamp} ({'in ' if gap >= 0 else ''}{_span(abs(gap))}{'' if gap >= 0 else ' ago'})"


def _span(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _holder(record: JobRecord, now: float) -> str | None:
    """Who holds a running job, and what happens if that worker has stopped: the lease is the
    evidence -- while it lasts the worker may be alive; once it has expired, the worker stopped
    renewing it, and the next worker to look for jobs takes the job over."""
    lease = record.lease
    if record.status.value != "running" or lease is None:
        return None
    if now < lease.until:
        return (
            f"held by {lease.owner}, lease until {_when(lease.until, now)}: renewed while that "
            "worker runs; if it stopped, taken over then"
        )
    return (
        f"held by a worker that stopped renewing ({lease.owner}, lease expired "
        f"{_when(lease.until, now)}); taken over when a worker next looks for jobs"
    )


def _summary(record: JobRecord, now: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": record.id,
        "status": record.status.value,
        "agent": record.job.agent,
        "attempts": record.attempts,
        "takeovers": record.takeovers,
    }
    if record.key is not None:
        out["key"] = record.key
    if record.status.value == "running" and record.lease is not None:
        moment = time.time() if now is None else now
        out["lease"] = {
            "owner": record.lease.owner,
            "until": record.lease.until,
            "expired": moment >= record.lease.until,
        }
    if record.result is not None:
        result = record.result
        out["result"] = {
            "content": result.content,
            "stop": result.stop.value,
            "partial": result.partial,
            "finish": None if result.finish is None else result.finish.value,
            # None: unknown (some turn reported none); ``estimated``: it includes estimates.
            "usage": None if result.total_usage is None else to_json(result.total_usage),
            "estimated": result.estimated,
        }
    if record.error is not None:
        out["error"] = record.error
    if record.pending:
        answered = {a.call_id for a in record.answers}
        out["waiting_for"] = [
            {"call_id": p.call_id, "tool": p.tool, "reason": p.reason}
            if p.question is None
            else {
                "call_id": p.call_id,
                "tool": p.tool,
                "reason": p.reason,
                "question": to_json(p.question),
            }
            for p in record.pending
            if p.call_id not in answered
        ]
    return out


#: The largest ``jobs submit --input-json`` accepted, in bytes.
MAX_INPUT_JSON = 16 * 1024 * 1024
EXAMPLE_INPUT = '[{"role": "user", "content": "What is 19 + 23?"}]'


def read_input_json(source: str, stdin: BinaryIO | None = None) -> tuple[Message, ...]:
    """The messages ``jobs submit --input-json`` gives a job: a JSON list of messages (each as
    :class:`~protocols.messages.Message` encodes: ``role`` and ``content``, with ``calls``,
    ``tool_call_id``, ``name``, ... where they apply) read from the file ``source``, or from
    ``stdin`` (default: the process's) when it is ``-``. At most :data:`MAX_INPUT_JSON` bytes;
    anything else is a :class:`~protocols.errors.ConfigError` saying what is wrong, and
    where."""
    where = "-" if source == "-" else source
    try:
        if source == "-":
            data = (stdin if stdin is not None else sys.stdin.buffer).read(MAX_INPUT_JSON + 1)
        else:
            with open(source, "rb") as file:
                data = file.read(MAX_INPUT_JSON + 1)
    except OSError as error:
        raise ConfigError(f"--input-json {where}: {error.strerror or error}") from None
    if len(data) > MAX_INPUT_JSON:
        raise ConfigError(f"--input-json {where}: larger than {MAX_INPUT_JSON} bytes")
    try:
        value = loads(data)
    except ProtocolError as error:
        raise ConfigError(f"--input-json {where}: not valid JSON: {error.message}") from None
    if not isinstance(value, list) or not value:
        raise ConfigError(
            f"--input-json {where}: must be a non-empty JSON list of messages, such as "
            f"{EXAMPLE_INPUT}"
        )
    messages: list[Message] = []
    for number, item in enumerate(value, start=1):
        if not isinstance(item, dict):
            raise ConfigError(
                f"--input-json {where}: message {number} is not a JSON object (write "
                f"{EXAMPLE_INPUT})"
            )
        try:
            messages.append(from_json(Message, item))
        except AgentsError as error:
            raise ConfigError(f"--input-json {where}: message {number}: {error.message}") from None
    return tuple(messages)


def _ended(record: JobRecord, what: str) -> str:
    return f"job {record.id} has already ended ({record.status.value}): {what}"


def _show(record: JobRecord, as_json: bool, out: TextIO, now: float | None = None) -> None:
    moment = time.time() if now is None else now
    summary = _summary(record, moment)
    if as_json:
        print(json.dumps(summary, ensure_ascii=False), file=out)
        return
    print(f"{record.id}  {record.status.value}  agent={record.job.agent}", file=out)
    print(f"  attempts {record.attempts}, takeovers {record.takeovers}", file=out)
    held = _holder(record, moment)
    if held is not None:
        print(f"  {held}", file=out)
    if "result" in summary:
        result = summary["result"]
        usage = "unknown" if result["usage"] is None else result["usage"]
        estimated = " (estimated)" if result["estimated"] else ""
        print(
            f"  stop {result['stop']}; finish {result['finish']}; usage {usage}{estimated}",
            file=out,
        )
        spent = record.result.total_usage if record.result is not None else None
        cost = spent.cost if spent is not None else None
        if cost is not None:  # priced (the agent had pricing=, or the vendor reported it)
            print(f"  cost {cost}", file=out)
        print(f"  {result['content']}", file=out)
    if "error" in summary:
        print(f"  error: {summary['error']}", file=out)
    for waiting in summary.get("waiting_for", []):
        if "question" in waiting:
            question = from_json(Question, waiting["question"])
            print(
                f"  waits for an answer (call {waiting['call_id']}): {question.prompt} "
                f"-- {question.expects()} (jobs answer --answer VALUE)",
                file=out,
            )
            continue
        print(
            f"  waits for approval of {waiting['tool']} (call {waiting['call_id']}): "
            f"{waiting['reason'] or 'no reason given'}",
            file=out,
        )


def _typed_answer(record: JobRecord, call_id: str, given: list[str]) -> Any:
    """The answer ``--answer`` gives (once, or repeated for several options) to the question
    call ``call_id`` of the job asks, read and checked: a :class:`ConfigError` saying what is
    wrong when the call asks no question or the question refuses it (nothing is written)."""
    request = next((p for p in record.pending if p.call_id == call_id), None)
    if request is None:
        raise ConfigError(f"job {record.id} does not wait for call {call_id!r}")
    question = request.question
    if question is None:
        raise ConfigError(
            f"call {call_id!r} of job {record.id} asks for an approval, not an answer: "
            "use --allow or --deny"
        )
    try:
        if len(given) == 1:
            return parse_answer(question, given[0])
        if question.kind != "choices":
            raise ConfigError(
                f"--answer is given {len(given)} times for a {question.kind!r} question"
            )
        return check_answer(question, [text.strip() for text in given])
    except ValidationError as error:
        raise ConfigError(f"call {call_id!r} of job {record.id}: {error.message}") from None


def store_main(action: str, args: Any, out: TextIO) -> int:
    """Run ``trio-agents store ACTION`` (``migrate``); returns the exit status."""
    from actors._postgres import redacted  # noqa: PLC0415
    from actors.durable import migrate_store  # noqa: PLC0415

    assert action == "migrate"
    check_store_url(args.store)
    before, after = trio.run(migrate_store, args.store)
    where = redacted(args.store)
    if before == after:
        out.write(f"{where}: schema version {after}, up to date\n")
    elif before == 0:
        out.write(f"{where}: created at schema version {after}\n")
    else:
        out.write(f"{where}: migrated from schema version {before} to {after}\n")
    return 0


#: The exit status of ``jobs wait`` when its ``--timeout`` passed first (as timeout(1)'s).
TIMED_OUT = 124
#: The exit status of ``jobs watch`` for a job that ended cancelled.
CANCELLED = 3
#: The exit status of ``jobs watch`` for a job that waits for input (approvals): answer them,
#: then watch again with ``--after`` the seq of its ``awaiting_input`` event.
WAITING = 4

#: How much of a tool result or an answer one line of ``jobs watch`` shows.
_SHOWN = 200


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _detail(event: RunEvent) -> str:
    """What one event says, for :func:`event_line` (without its seq and kind)."""
    from protocols.messages import ToolFailure  # noqa: PLC0415

    data = event.data
    kind = event.kind
    if kind in ("content", "thinking"):
        return json.dumps(data.get("text", ""), ensure_ascii=False)
    if kind == "started":
        return f"agent {data.get('agent')}"
    if kind == "turn":
        return f"provider call {data.get('turn')}"
    if kind == "tool_call":
        call = data["call"]
        return f"{call.name} {_clip(_compact(call.arguments))} (call {call.id})"
    if kind == "tool_result":
        result = data["result"]
        if isinstance(result, ToolFailure):
            return f"{result.name} failed: {_clip(result.error)} (call {result.id})"
        return f"{result.name} -> {_clip(_compact(result.value))} (call {result.id})"
    if kind == "usage":
        usage = data.get("usage")
        told = (
            "unknown" if usage is None else f"prompt {usage.prompt}, completion {usage.completion}"
        )
        return told + (" (estimated)" if data.get("estimated") else "")
    if kind == "approval_requested":
        reason = data.get("reason") or "no reason given"
        return f"{data.get('tool')} (call {data.get('call_id')}): {reason}"
    if kind == "approval_answered":
        verdict = "allowed" if data.get("allow") else "denied"
        reason = f": {data['reason']}" if data.get("reason") else ""
        return f"call {data.get('call_id')} {verdict}{reason}"
    if kind == "awaiting_input":
        calls = data.get("calls") or []
        asked = ", ".join(f"{c.get('tool')} (call {c.get('call_id')})" for c in calls)
        return f"waits for approval of {asked or 'its calls'}"
    if kind in ("finished", "cancelled"):
        result = data.get("result")
        if result is None:
            return "before it began"
        content = _clip(json.dumps(result.content, ensure_ascii=False))
        return f"stop {result.stop.value}, {result.turns} turn(s): {content}"
    if kind == "failed":
        error = data.get("error") or {}
        code = f" ({error['code']})" if error.get("code") else ""
        return f"{error.get('type')}{code}: {_clip(str(error.get('message') or ''))}"
    if kind == "takeover":
        return f"attempt with fence {data.get('fence')} ({data.get('reason')})"
    if kind == "rewind":
        return f"to seq {data.get('to')}: what was shown after it is void"
    if kind == "gap":
        return f"events {data.get('first')}..{event.seq} are gone"
    if kind == "compaction":
        return f"{data.get('replaced')} message(s) summarised ({data.get('reason')})"
    if kind == "message":
        message = data["message"]
        return f"{message.role.value}: {_clip(json.dumps(message.content, ensure_ascii=False))}"
    if kind == "subagent_started":
        return f"{data.get('agent')} as run {data.get('run_id')} (call {data.get('call_id')})"
    if kind == "subagent_finished":
        return f"run {data.get('run_id')}: {data.get('status')} (call {data.get('call_id')})"
    if kind == "handoff":
        return f"to {data.get('agent')} (call {data.get('call_id')})"
    if kind == "retry":
        attempt, reason, delay = data.get("attempt"), data.get("reason"), data.get("delay")
        return f"attempt {attempt} failed ({reason}); next in {delay} s"
    if kind == "progress":
        return f"{_clip(str(data.get('text', '')))} (call {data.get('call_id')})"
    return _clip(str(data.get("reason", "")))  # guard, fault


def event_line(event: RunEvent) -> str:
    """One event as ``jobs watch`` prints it: its seq, its kind, and what it says, on one line
    (a delta's text as a JSON string, so that its newlines show as ``\\n``)."""
    return f"{event.seq:>5} {event.kind:<18} {_detail(event)}".rstrip()


def _watch_status(event: RunEvent | None, record: JobRecord | None) -> int:
    """The exit status of ``jobs watch``: by the terminal event it printed, else (nothing was
    left to print after ``--after``) by the job's record."""
    if event is not None:
        if event.kind == "finished":
            result = event.data.get("result")
            return 1 if result is None or result.partial else 0
        return {"cancelled": CANCELLED, "awaiting_input": WAITING}.get(event.kind, 1)
    assert record is not None
    return {"completed": 0, "cancelled": CANCELLED}.get(record.status.value, 1)


async def _watch(store: RunStore, args: Any, out: TextIO, err: TextIO) -> int:
    """``jobs watch``: the job's events after ``--after``, one line each (``--json``: one
    :func:`~protocols.live.event_to_json` object each), until the terminal one. A job that
    waits for input says on ``err`` how to go on."""
    from actors.durable import watch_job  # noqa: PLC0415
    from actors.durable._ops import existing_job  # noqa: PLC0415
    from protocols.live import event_to_json  # noqa: PLC0415

    last: RunEvent | None = None
    async for event in watch_job(store, args.id, after=args.after, poll=args.poll):
        if args.json:
            line = json.dumps(event_to_json(event), ensure_ascii=False)
        else:
            line = event_line(event)
        print(line, file=out, flush=True)
        last = event
    if last is not None and last.terminal:
        if last.kind == "awaiting_input":
            print(
                f"trio-agents jobs: job {args.id} waits for input: answer it (trio-agents jobs "
                f"answer), then watch the rest with --after {last.seq}",
                file=err,
            )
        return _watch_status(last, None)
    # Nothing after --after: the job had ended by then.
    return _watch_status(None, await existing_job(store, args.id))


def jobs_main(action: str, args: Any, out: TextIO, err: TextIO | None = None) -> int:
    """Run ``trio-agents jobs ACTION``; returns the exit status. Only ``submit`` creates a
    store; the other actions refuse a ``--store`` where there is none."""
    check_store_url(args.store)
    messages = None
    if action == "submit" and getattr(args, "input_json", None) is not None:
        messages = read_input_json(args.input_json)  # before the store is made: nothing to undo
    return trio.run(_jobs, action, args, out, sys.stderr if err is None else err, messages)


async def _jobs(
    action: str, args: Any, out: TextIO, err: TextIO, messages: tuple[Message, ...] | None
) -> int:
    from actors._postgres import redacted  # noqa: PLC0415
    from actors.durable import (  # noqa: PLC0415
        answer_job,
        cancel_job,
        purge_job,
        submit_job,
        wait_job,
    )
    from actors.durable._ops import existing_job  # noqa: PLC0415
    from actors.durable._sql_store import SQLRunStore  # noqa: PLC0415
    from protocols.jobs import AgentJob, JobStatus  # noqa: PLC0415

    store = await _open(args.store, create=action == "submit")
    try:
        if action == "submit":
            if messages is not None:
                job = AgentJob(args.agent, messages)
            else:
                job = AgentJob.ask(args.agent, args.text)
            record, created = await submit_job(store, job, key=args.key)
            if args.json:
                print(json.dumps({"id": record.id, "created": created}), file=out)
            else:
                note = "" if created else "  (the key's existing job)"
                print(f"{record.id}{note}", file=out)
            if isinstance(store, SQLRunStore) and await store.worker_seen() is None:
                # Submitted all the same (a worker may start later), but a mistyped --store
                # (a new store no worker will ever look at) shows here.
                print(
                    f"trio-agents jobs: warning: no worker has ever run on "
                    f"{redacted(args.store)}: the job waits until one does (trio-agents "
                    "worker --store URL --app MODULE:ATTR)",
                    file=err,
                )
            return 0
        if action == "show":
            found = await store.get(args.id)
            if found is None:
                stone = await store.purged(args.id)
                raise ConfigError(
                    f"job {args.id} was purged" if stone is not None else f"no job {args.id!r}"
                )
            _show(found, args.json, out)
            return 0
        if action == "list":
            statuses = [JobStatus(args.status)] if args.status else None
            records = await store.list(statuses=statuses, limit=args.limit)
            if args.json:
                print(json.dumps([_summary(r) for r in records], ensure_ascii=False), file=out)
            else:
                for record in records:
                    print(f"{record.id}  {record.status.value:<14} {record.job.agent}", file=out)
            return 0
        if action == "cancel":
            record, changed = await cancel_job(store, args.id)
            if changed:
                state = "cancelled" if record.terminal else "cancel requested (running)"
            elif record.status is JobStatus.CANCELLED:
                state = "already cancelled"
            elif not record.terminal:
                state = f"cancel already requested ({record.status.value})"
            else:  # it ended otherwise before: the cancel did nothing
                raise ConfigError(_ended(record, "nothing to cancel"))
            print(f"{record.id}: {state}", file=out)
            return 0
        if action == "answer":
            # An answer resent after it landed is a no-op that succeeds -- unless the job has
            # ended since: then nothing is answered, and saying its status would look as if
            # it worked.
            before = await existing_job(store, args.id)
            if before.terminal:
                raise ConfigError(_ended(before, "nothing to answer"))
            if getattr(args, "answer", None) is not None:
                value = _typed_answer(before, args.call_id, args.answer)
                record = await answer_job(
                    store, args.id, args.call_id, True, args.reason or "", value=value
                )
            else:
                record = await answer_job(
                    store, args.id, args.call_id, args.allow, args.reason or ""
                )
            print(f"{record.id}: {record.status.value}", file=out)
            return 0
        if action == "purge":
            await purge_job(store, args.id)
            print(f"{args.id}: purged", file=out)
            return 0
        if action == "watch":
            return await _watch(store, args, out, err)
        assert action == "wait"
        ended: JobRecord | None = None
        with trio.move_on_after(args.timeout if args.timeout is not None else float("inf")):
            ended = await wait_job(store, args.id, poll=args.poll)
        # (Timed out: it may have ended just now -- and --timeout 0 asks whether it has.)
        record = ended if ended is not None else await existing_job(store, args.id)
        if not record.terminal:
            print(
                f"trio-agents jobs: job {record.id} has not ended within {args.timeout:g} s "
                f"(it is {record.status.value})",
                file=err,
            )
            return TIMED_OUT
        _show(record, args.json, out)
        return 0 if record.status is JobStatus.COMPLETED else 1
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
