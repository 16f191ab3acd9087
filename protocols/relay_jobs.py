"""The relay's durable jobs API, sans-IO: its routes, what a request may say, how a job and its
events are shown to the token that submitted it, and its errors.

:mod:`actors.relay` serves it (``RelayServer(..., jobs=RelayJobs(store))``); everything here is
pure -- bytes and records in, values and JSON out -- and is tested without an event loop.

Guarantees:

* **Tenancy is in the data.** A job submitted through the relay records its submitter's identity
  (the token's *name*, never its secret) in its metadata under :data:`OWNER_FIELD`, and its
  idempotency key is stored under a name of that owner's own (:func:`owned_key`): two tokens
  using one key get two jobs, and neither can reach the other's through it.
* **Strict input.** A request body is strict JSON with only the fields documented here (an
  unknown field is refused), its ``input`` at most ``max_input`` bytes as JSON; every refusal is
  a :class:`~protocols.errors.ProtocolError` whose ``code`` is one of :data:`STATUS`.
* **What crosses is the owner's own, and no exception's text.** :func:`job_view` and
  :func:`shown_event` show a failed job's error by its type, and its message only when the job
  system wrote it (``the attempt timed out``): an exception's message -- which may quote the
  upstream model's server or a tool's -- stays on the server, as every relay error does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ._json import JSON, dumpb, loads
from .codec import from_json, to_json
from .errors import AgentsError, Category, ProtocolError
from .jobs import AgentJob, ApprovalAnswer, JobRecord, JobStatus
from .live import RunEvent, event_to_json
from .messages import Message, Role
from .questions import MAX_ANSWER_CHARS, MAX_OPTIONS
from .relay import JobEventFrame
from .settings import ModelSettings

__all__ = [
    "DEFAULT_MAX_INPUT",
    "JOBS_PATH",
    "MAX_KEY",
    "MAX_REASON",
    "OWNER_FIELD",
    "STATUS",
    "JobRoute",
    "Submission",
    "client_key",
    "decode_answers",
    "decode_submit",
    "error_body",
    "error_view",
    "job_event_frame",
    "job_view",
    "owned_key",
    "owner_of",
    "route",
    "same_request",
    "shown_event",
]

#: Where the jobs API lives on a relay.
JOBS_PATH: Final = "/v1/jobs"

#: The key of a job's metadata that names the relay token that submitted it (its name).
OWNER_FIELD: Final = "relay_owner"

#: The most bytes a job's ``input`` may take, as JSON, by default.
DEFAULT_MAX_INPUT: Final = 512 * 1024

#: The longest idempotency key a client may give (characters).
MAX_KEY: Final = 128

#: The longest reason an approval's answer may give (characters).
MAX_REASON: Final = 2000

#: Every error code of the jobs API and its HTTP status.
STATUS: Final[Mapping[str, int]] = {
    "invalid": 400,
    "unknown_agent": 400,
    "unauthorized": 401,
    "forbidden_origin": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "timeout": 408,
    "key_conflict": 409,
    "key_purged": 409,
    "conflict": 409,
    "ended": 409,
    "too_large": 413,
    "rate_limited": 429,
    "too_many_streams": 429,
    "internal": 500,
    "unavailable": 503,
    "shutdown": 503,
}

#: The fixed text of each code, where a refusal says nothing more specific.
_TEXT: Final[Mapping[str, str]] = {
    "invalid": "the request is not valid",
    "unknown_agent": "no such agent on this relay",
    "unauthorized": "a valid bearer token is required",
    "forbidden_origin": "this origin may not use the relay",
    "not_found": "no such job",
    "method_not_allowed": "this method is not allowed here",
    "timeout": "the request body did not arrive in time",
    "key_conflict": "this idempotency key was used for another request",
    "key_purged": "this idempotency key's job was purged; use a new key",
    "conflict": "the job cannot take this answer",
    "ended": "the job has ended",
    "too_large": "the request is too large",
    "rate_limited": "too many requests; try again later",
    "too_many_streams": "too many event streams open for this token",
    "internal": "the relay failed to answer",
    "unavailable": "the job store is unavailable; try again",
    "shutdown": "the relay is shutting down",
}

#: The codes a client may retry as they are.
_RETRYABLE: Final = frozenset(
    {"timeout", "rate_limited", "too_many_streams", "unavailable", "shutdown"}
)

_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")
#: An error text that describes an exception: ``TypeName: its message``.
_DESCRIBED: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_.]{0,99}): ")
_SUBMIT_FIELDS: Final = frozenset({"agent", "input", "settings", "key"})
_ANSWER_FIELDS: Final = frozenset({"call_id", "allow", "reason", "answer"})


def _refuse(message: str, code: str = "invalid") -> ProtocolError:
    return ProtocolError(message, code=code, category=Category.USER)


# ---------------------------------------------------------------------------------------------
# Routes


@attrs.frozen
class JobRoute:
    """Where a request under :data:`JOBS_PATH` goes: ``action`` (``submit``, ``show``,
    ``cancel``, ``answers`` or ``events``), the job's ``id`` (``None`` for ``submit``) and the
    one HTTP ``method`` the action takes."""

    action: str
    id: str | None
    method: str


_ACTIONS: Final[Mapping[str, str]] = {"cancel": "POST", "answers": "POST", "events": "GET"}


def route(path: str) -> JobRoute | None:
    """The route of ``path``, or ``None`` when it names none (an id that cannot be one --
    not 1 to 128 letters, digits, ``-`` or ``_`` -- names none either)."""
    if path == JOBS_PATH:
        return JobRoute("submit", None, "POST")
    if not path.startswith(JOBS_PATH + "/"):
        return None
    parts = path[len(JOBS_PATH) + 1 :].split("/")
    if not _ID.fullmatch(parts[0]):
        return None
    if len(parts) == 1:
        return JobRoute("show", parts[0], "GET")
    if len(parts) == 2 and parts[1] in _ACTIONS:
        return JobRoute(parts[1], parts[0], _ACTIONS[parts[1]])
    return None


# ---------------------------------------------------------------------------------------------
# Requests


@attrs.frozen
class Submission:
    """A decoded ``POST /v1/jobs``: the ``job`` to admit (its metadata naming its owner) and
    the ``key`` to admit it under (:func:`owned_key` of the client's, ``None`` without one)."""

    job: AgentJob
    key: str | None


def owned_key(owner: str, key: str) -> str:
    """The store's key for ``owner``'s idempotency key ``key``: a name no other owner's key can
    take (the owner's length is in it, so no two ``(owner, key)`` pairs meet)."""
    return f"relay:{len(owner)}:{owner}:{key}"


def owner_of(record: JobRecord) -> str | None:
    """The name of the relay token that submitted the job (``None``: not one submitted through
    a relay)."""
    owner = record.job.metadata.get(OWNER_FIELD)
    return owner if isinstance(owner, str) else None


def client_key(record: JobRecord) -> str | None:
    """The idempotency key the job's owner gave (``None`` when it gave none)."""
    owner = owner_of(record)
    if record.key is None or owner is None:
        return None
    prefix = owned_key(owner, "")
    return record.key[len(prefix) :] if record.key.startswith(prefix) else None


def _object(body: bytes | str | Mapping[str, Any], what: str) -> dict[str, Any]:
    if isinstance(body, Mapping):  # decoded already (a websocket frame's)
        return dict(body)
    try:
        value = loads(body)
    except AgentsError as error:
        raise _refuse(f"{what} must be a JSON object: {error.message}") from None
    if not isinstance(value, dict):
        raise _refuse(f"{what} must be a JSON object")
    return value


def _input(value: object, max_input: int) -> tuple[Message, ...]:
    if isinstance(value, str):
        if not value:
            raise _refuse("input must not be empty")
        messages: tuple[Message, ...] = (Message.user(value),)
    elif isinstance(value, list):
        if not value:
            raise _refuse("input must not be empty")
        decoded = []
        for number, item in enumerate(value, start=1):
            if not isinstance(item, dict):
                raise _refuse(f"input message {number} must be a JSON object")
            try:
                message = from_json(Message, item, category=Category.USER)
            except AgentsError as error:
                raise _refuse(f"input message {number}: {error.message}") from None
            if message.role is Role.SYSTEM:
                raise _refuse(
                    f"input message {number}: a system message is the agent's own, not a "
                    "client's (send user, assistant or tool messages)"
                )
            decoded.append(message)
        messages = tuple(decoded)
    else:
        raise _refuse(
            'input must be a text (one user message) or a list of messages, such as [{"role": '
            '"user", "content": "..."}]'
        )
    size = len(dumpb(value))
    if size > max_input:
        raise _refuse(f"input is {size} bytes as JSON; at most {max_input}", "too_large")
    return messages


def _settings(value: object, max_tokens: int | None) -> ModelSettings | None:
    if value is None:
        settings = None
    elif not isinstance(value, dict):
        raise _refuse("settings must be a JSON object of model settings")
    else:
        try:
            settings = ModelSettings.of(value)
        except AgentsError as error:
            raise _refuse(f"settings: {error.message}") from None
    if max_tokens is None:
        return settings
    settings = settings or ModelSettings()
    if settings.extra:
        raise _refuse(
            "this relay caps output tokens: vendor options in settings.extra are refused (they "
            "could lift the cap under another name)"
        )
    if settings.max_tokens is None or settings.max_tokens > max_tokens:
        settings = attrs.evolve(settings, max_tokens=max_tokens)
    return settings


def _key(value: object, header: str | None) -> str | None:
    if value is not None and not isinstance(value, str):
        raise _refuse("key must be a string")
    if value is not None and header is not None and value != header:
        raise _refuse("the body's key and the Idempotency-Key header differ")
    key = value if value is not None else header
    if key is None:
        return None
    if not key or len(key) > MAX_KEY or not key.isprintable():
        raise _refuse(f"an idempotency key is 1 to {MAX_KEY} printable characters")
    return key


def decode_submit(
    body: bytes | str | Mapping[str, Any],
    *,
    owner: str,
    key_header: str | None = None,
    max_input: int = DEFAULT_MAX_INPUT,
    max_tokens: int | None = None,
) -> Submission:
    """A ``POST /v1/jobs`` body, for the token named ``owner``: ``{"agent": NAME, "input":
    TEXT or [MESSAGE, ...], "settings": {...}, "key": KEY}`` (``settings`` and ``key``
    optional; ``key_header``: the request's ``Idempotency-Key``, the same key). ``input`` is
    one user message, or messages as :class:`~protocols.messages.Message` encodes them (no
    ``system`` message: the agent's own prompt is the server's). ``settings`` are
    :class:`~protocols.settings.ModelSettings` fields; with ``max_tokens`` (the relay's cap on
    output tokens) a larger or missing ``max_tokens`` becomes the cap and ``extra`` is refused.
    ``body`` may be a decoded JSON object (a ``job_submit`` frame's ``job``), checked the same.
    Raises :class:`~protocols.errors.ProtocolError` (``invalid``, or ``too_large`` for an
    input over ``max_input`` bytes)."""
    data = _object(body, "a job")
    unknown = sorted(set(data) - _SUBMIT_FIELDS)
    if unknown:
        raise _refuse(
            f"a job has no field {unknown[0][:60]!r}; its fields are agent, input, settings, key"
        )
    agent = data.get("agent")
    if not isinstance(agent, str) or not agent.strip() or len(agent) > 200:
        raise _refuse("agent must be the name of one of the relay's agents")
    if "input" not in data:
        raise _refuse("a job needs its input")
    messages = _input(data["input"], max_input)
    settings = _settings(data.get("settings"), max_tokens)
    key = _key(data.get("key"), key_header)
    try:
        job = AgentJob(agent, messages, settings=settings, metadata={OWNER_FIELD: owner})
    except AgentsError as error:  # pragma: no cover - every field was checked above
        raise _refuse(error.message) from None
    return Submission(job, None if key is None else owned_key(owner, key))


def same_request(job: AgentJob, other: AgentJob) -> bool:
    """Whether two submitted jobs ask the same: agent, settings and input, the input's messages
    compared without their ids and times (each submit mints new ones)."""

    def bare(messages: tuple[Message, ...]) -> list[Message]:
        return [attrs.evolve(message, id="-", created_at=0.0) for message in messages]

    return (job.agent, job.settings, bare(job.input)) == (
        other.agent,
        other.settings,
        bare(other.input),
    )


def _answer(item: object, number: int | None) -> ApprovalAnswer:
    where = "an answer" if number is None else f"answer {number}"
    if not isinstance(item, dict):
        raise _refuse(f"{where} must be a JSON object")
    unknown = sorted(set(item) - _ANSWER_FIELDS)
    if unknown:
        raise _refuse(
            f"{where} has no field {unknown[0][:60]!r}; its fields are call_id, allow, reason, "
            "answer"
        )
    call_id, reason = item.get("call_id"), item.get("reason", "")
    # An answer to a question: ``allow`` defaults to true (and must be, with an answer).
    allow = item.get("allow", True if "answer" in item else None)
    if not isinstance(call_id, str) or not call_id or len(call_id) > 200:
        raise _refuse(f"{where}: call_id must be the id of the tool call asked about")
    if not isinstance(allow, bool):
        raise _refuse(f"{where}: allow must be true or false")
    if not isinstance(reason, str) or len(reason) > MAX_REASON:
        raise _refuse(f"{where}: reason must be a text of at most {MAX_REASON} characters")
    if "answer" not in item:
        return ApprovalAnswer(call_id, allow, reason)
    value = item["answer"]
    if not allow or value is None:
        raise _refuse(f"{where}: an answer to a question allows (to decline, leave answer out)")
    # Its type and size, roughly; the question itself checks it (check_answer) in the store.
    if isinstance(value, str):
        fits = len(value) <= MAX_ANSWER_CHARS
    elif isinstance(value, list):
        fits = len(value) <= MAX_OPTIONS and all(
            isinstance(option, str) and len(option) <= MAX_ANSWER_CHARS for option in value
        )
    else:
        fits = isinstance(value, int | float) and not isinstance(value, bool)
    if not fits:
        raise _refuse(f"{where}: answer must be a text, a list of options or a number")
    return ApprovalAnswer(call_id, allow, reason, value)


def decode_answers(body: bytes | str | Mapping[str, Any]) -> tuple[ApprovalAnswer, ...]:
    """A ``POST /v1/jobs/{id}/answers`` body: one answer ``{"call_id": ID, "allow": BOOL,
    "reason": TEXT}`` (``reason`` optional: what the model reads) -- for a question the job asks,
    ``{"call_id": ID, "answer": VALUE}`` (text, a list of options, a number; checked against the
    question when it is recorded), or ``"allow": false`` to decline it -- or several as
    ``{"answers": [...]}`` (also as a decoded JSON object: a ``job_answer`` frame's). Raises
    :class:`~protocols.errors.ProtocolError` ``invalid``."""
    data = _object(body, "an answer")
    if "answers" in data:
        if set(data) != {"answers"}:
            raise _refuse('several answers go alone in {"answers": [...]}')
        items = data["answers"]
        if not isinstance(items, list) or not items or len(items) > 256:
            raise _refuse("answers must be a list of 1 to 256 answers")
        answers = tuple(_answer(item, number) for number, item in enumerate(items, start=1))
    else:
        answers = (_answer(data, None),)
    if len({answer.call_id for answer in answers}) != len(answers):
        raise _refuse("two answers to one call")
    return answers


# ---------------------------------------------------------------------------------------------
# Answers


def error_view(text: str | None, status: JobStatus | None = None) -> dict[str, JSON] | None:
    """How a job's error shows to its owner: ``{"type", "message"}``. An exception's
    description (``TypeName: its message``) shows its type and a fixed message -- its own text
    may quote the upstream's server or a tool and stays on the server (``trio-agents jobs show``
    has it); what the job system wrote shows as it is, typed ``JobError``."""
    if text is None:
        return None
    described = _DESCRIBED.match(text)
    if described is None:
        return {"type": "JobError", "message": text}
    ended = status.value if status is not None else "failed"
    return {
        "type": described.group(1),
        "message": (
            f"the job ended {ended} on a {described.group(1)}; its message is not shown over "
            "the relay (the job's record on the server has it)"
        ),
    }


def job_view(record: JobRecord) -> dict[str, JSON]:
    """The job as its owner sees it: ``id``, ``agent``, ``status``, ``key`` (the owner's),
    ``created_at``, ``updated_at``, ``attempts``, ``takeovers``, ``turns``, ``usage``,
    ``cancel_requested``, ``pending`` (the approvals it waits for, unanswered: ``call_id``,
    ``tool``, ``reason``, and ``question`` for a question), ``result`` (the
    :class:`~protocols.messages.AgentResult`, as JSON) and ``error`` (:func:`error_view`)."""
    answered = {answer.call_id for answer in record.answers}
    return {
        "id": record.id,
        "agent": record.job.agent,
        "status": record.status.value,
        "key": client_key(record),
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "attempts": record.attempts,
        "takeovers": record.takeovers,
        "turns": record.turns,
        "usage": None if record.usage is None else to_json(record.usage),
        "cancel_requested": record.cancel_requested,
        "pending": [
            {"call_id": request.call_id, "tool": request.tool, "reason": request.reason}
            if request.question is None
            else {
                "call_id": request.call_id,
                "tool": request.tool,
                "reason": request.reason,
                "question": to_json(request.question),
            }
            for request in record.pending
            if request.call_id not in answered
        ],
        "result": None if record.result is None else to_json(record.result),
        "error": error_view(record.error, record.status),
    }


def shown_event(event: RunEvent) -> RunEvent:
    """``event`` as the job's owner is shown it: a ``failed`` event's error as
    :func:`error_view` shows one (its type, and no exception's message); any other event as
    it is."""
    if event.kind != "failed":
        return event
    error = event.data.get("error")
    if not isinstance(error, Mapping):
        return event
    kind, message = error.get("type"), error.get("message")
    text = message if isinstance(message, str) else ""
    if isinstance(kind, str) and kind != "JobError":
        text = f"{kind}: {text}"
    view = error_view(text) or {}
    shown = {"type": view.get("type"), "code": error.get("code"), "message": view.get("message")}
    return attrs.evolve(event, data={**event.data, "error": shown})


def job_event_frame(event: RunEvent, request_id: str) -> JobEventFrame:
    """The ``job_event`` frame of ``event`` for the ``job_watch`` ``request_id``: the event's
    JSON as its Server-Sent Event carries it, shown as :func:`shown_event` shows it."""
    return JobEventFrame(request_id, dict(event_to_json(shown_event(event))))


def error_body(code: str, message: str | None = None) -> bytes:
    """A refusal's JSON body: ``{"error": {"code", "message", "retryable"}}`` -- ``message``
    the refusal's own words, else the fixed text of ``code``."""
    return dumpb(
        {
            "error": {
                "code": code,
                "message": message if message is not None else _TEXT.get(code, code),
                "retryable": code in _RETRYABLE,
            }
        }
    )
