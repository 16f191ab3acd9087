"""A relay run's events as frames and frames as events: what a ``watch`` replays, the JSON and SSE
bodies of the runs routes, and :class:`RunContinuation`, a client's resumption of a run (see
:mod:`protocols.relay`, which re-exports them)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import attrs

from ._relay_checks import ERROR_MESSAGES, MAX_RUN_ID, MAX_SAFE_INTEGER
from ._relay_frames import (
    AbortFrame,
    ApprovalFrame,
    DeltaFrame,
    ErrorFrame,
    GapFrame,
    ResultFrame,
    ServerFrame,
    _new,
    _set,
    error_frame,
)
from .codec import from_json, to_json
from .errors import Category, ProtocolError, ProviderError, ValidationError
from .live import RunEvent, decimal_seq, event_to_json, event_to_sse
from .messages import ProviderResult, ToolCall

# -- runs: frames and events --------------------------------------------------------------------

#: The error ``type`` a relay run's ``failed`` event names.
RUN_ERROR_TYPE: Final = "RelayError"


def frame_events(frame: ServerFrame) -> list[tuple[str, Any]]:
    """The events of a run that ``frame`` stands for, as ``(kind, data)`` in order (see
    :class:`~protocols.live.RunEvent`; a delta's data is its text alone, as
    :class:`~protocols.live.EventLog` keeps it): ``delta`` -> ``content`` / ``thinking``;
    ``approval`` -> ``approval_requested`` (with ``call``, the tool call as JSON); ``result``
    -> a ``tool_call`` per call, ``usage`` and ``finished`` (``response``: the
    :class:`~protocols.messages.ProviderResult`); ``abort`` -> ``cancelled`` (``response``: the
    partial); an ``error`` of a request -> ``failed`` (``error``: ``type``, ``code``,
    ``message``, ``retryable``). Other frames stand for no event. The frame's own seq is its
    last event's. On a wire, :func:`run_event_json` is such an event's JSON (its
    ``response`` as JSON too)."""
    kind = type(frame)
    if kind is DeltaFrame:
        assert isinstance(frame, DeltaFrame)
        return [(frame.channel, frame.text)]
    if kind is ResultFrame:
        assert isinstance(frame, ResultFrame)
        result = frame.result
        events: list[tuple[str, Any]] = [("tool_call", {"call": call}) for call in result.calls]
        events.append(
            ("usage", {"usage": result.usage, "estimated": False, "finish": str(result.finish)})
        )
        events.append(("finished", {"response": result}))
        return events
    if kind is AbortFrame:
        assert isinstance(frame, AbortFrame)
        return [("cancelled", {"response": frame.partial})]
    if kind is ErrorFrame:
        assert isinstance(frame, ErrorFrame)
        if frame.id is None:
            return []
        error = {
            "type": RUN_ERROR_TYPE,
            "code": frame.code,
            "message": frame.message,
            "retryable": frame.retryable,
        }
        return [("failed", {"error": error})]
    if kind is ApprovalFrame:
        assert isinstance(frame, ApprovalFrame)
        call = frame.call
        data = {"call_id": call.id, "tool": call.name, "reason": frame.reason}
        return [("approval_requested", {**data, "call": to_json(call)})]
    return []


def with_seq(frame: ServerFrame, seq: int) -> ServerFrame:
    """``frame`` carrying ``seq`` (a frame of a run, on a connection of version 3)."""
    if type(frame) is DeltaFrame:  # the hot path: no validation twice
        copy = _new(DeltaFrame)
        _set(copy, "id", frame.id)
        _set(copy, "channel", frame.channel)
        _set(copy, "text", frame.text)
        _set(copy, "seq", seq)
        return copy
    if not isinstance(frame, ResultFrame | AbortFrame | ErrorFrame | ApprovalFrame):
        raise ValidationError(f"a {type(frame).__name__} carries no seq")
    return attrs.evolve(frame, seq=seq)


def event_frame(event: RunEvent, request_id: str) -> ServerFrame | None:
    """The frame (of version 3, with the event's ``seq``) a client following a relay run
    under ``request_id`` gets for ``event``: ``content`` / ``thinking`` -> ``delta``,
    ``approval_requested`` -> ``approval``, ``finished`` -> ``result``, ``cancelled`` ->
    ``abort``, ``failed`` -> ``error``, ``gap`` -> ``gap``; ``None`` for the events no frame
    stands for (``tool_call`` and ``usage`` are in the ``result``). The inverse of
    :func:`frame_events`. Raises :class:`~protocols.errors.ProtocolError` for an event whose
    data a relay run cannot have."""
    kind, data, seq = event.kind, event.data, event.seq
    try:
        if kind == "content" or kind == "thinking":  # noqa: PLR1714
            copy = _new(DeltaFrame)
            text = data["text"]
            if type(text) is not str or not text:
                raise ValidationError("a delta's text must be a non-empty string")
            _set(copy, "id", request_id)
            _set(copy, "channel", kind)
            _set(copy, "text", text)
            _set(copy, "seq", seq)
            return copy
        if kind == "finished":
            return ResultFrame(request_id, _response(data["response"]), seq)
        if kind == "cancelled":
            return AbortFrame(request_id, _response(data["response"]), seq)
        if kind == "failed":
            error = data.get("error")
            code = error.get("code") if isinstance(error, dict) else None
            if not isinstance(code, str) or code not in ERROR_MESSAGES:
                code = "upstream"
            return error_frame(code, request_id, seq)
        if kind == "approval_requested":
            call = from_json(ToolCall, data["call"])
            return ApprovalFrame(request_id, call, data.get("reason"), seq)
        if kind == "gap":
            return GapFrame(request_id, data["first"], seq)
    except (KeyError, TypeError, ValidationError) as error:
        raise ProtocolError(f"a relay run's {kind} event is malformed: {error}") from None
    return None


def _response(value: Any) -> ProviderResult:
    if isinstance(value, ProviderResult):
        return value
    result: ProviderResult = from_json(ProviderResult, value)
    return result


def run_event_json(event: RunEvent) -> dict[str, Any]:
    """A relay run's ``event`` as strict JSON data: :func:`~protocols.live.event_to_json`, with
    the ``response`` of a ``finished`` or ``cancelled`` event (a provider result) as JSON too --
    what :func:`~protocols.live.event_from_json` reads back (the ``response`` stays JSON there,
    and :func:`event_frame` takes either)."""
    return event_to_json(_json_response(event))


def _json_response(event: RunEvent) -> RunEvent:
    response = event.data.get("response")
    if not isinstance(response, ProviderResult):
        return event
    data = {**event.data, "response": to_json(response)}
    return RunEvent(event.run_id, event.seq, event.kind, event.time, data)


def run_event_sse(event: RunEvent) -> bytes:
    """A relay run's ``event`` as one Server-Sent Event (:func:`~protocols.live.event_to_sse`:
    ``id:`` its seq), its ``response`` as JSON."""
    return event_to_sse(_json_response(event))


def parse_start_index(value: str | None) -> int:
    """The ``startIndex`` (or ``after``) a polling client sent, as a seq: ``0`` for none.
    Raises :class:`~protocols.errors.ValidationError` for anything but a non-negative safe
    integer in decimal (002's rule: a client checks it before sending, a server again)."""
    return decimal_seq(
        value, most=MAX_SAFE_INTEGER, refusal="startIndex must be a non-negative safe integer"
    )


#: Follow-up requests a :class:`RunContinuation` makes by default before it gives up.
DEFAULT_CONTINUATION_LIMIT: Final = 1000


class RunContinuation:
    """002's continuation rule, for a client that follows run ``run_id`` by polling
    (``GET /v1/runs/{id}/events?startIndex=N``), sans-IO: it says what to ask for next and
    sorts the answers.

    * ``start_index`` (the next request's ``startIndex``) is a non-negative safe integer,
      checked here -- before any request is sent (:class:`~protocols.errors.ValidationError`).
    * :meth:`feed` takes one answer (its events, and the ``x-relay-tail-index`` header: the
      seq the body comes after) and returns what to deliver: the events after
      ``start_index``, in order, through the terminal one -- an event already delivered is
      never delivered again, whatever the answers overlap. The next request starts after the
      last event returned.
    * An empty answer without the terminal event is a *polling gap* (:attr:`polling_gap`):
      the client waits briefly, honouring cancellation, and asks again for the same
      ``start_index``.
    * After the terminal event, :attr:`done`: nothing more belongs to the stream.
    * ``limit`` bounds the follow-up requests (the answers after the first; ``None``: no
      bound): once it is spent without the terminal event, :meth:`query` raises
      :class:`~protocols.errors.ProviderError` (``continuation_limit``). With ``limit=0`` any
      answer that does not end the run fails.
    """

    __slots__ = ("answers", "done", "limit", "polling_gap", "run_id", "start_index")

    def __init__(
        self,
        run_id: str,
        *,
        start_index: int = 0,
        limit: int | None = DEFAULT_CONTINUATION_LIMIT,
    ) -> None:
        if not isinstance(run_id, str) or not 1 <= len(run_id) <= MAX_RUN_ID:
            raise ValidationError(f"run_id must be a string of 1 to {MAX_RUN_ID} characters")
        if (
            isinstance(start_index, bool)
            or not isinstance(start_index, int)
            or not 0 <= start_index <= MAX_SAFE_INTEGER
        ):
            raise ValidationError("startIndex must be a non-negative safe integer")
        if limit is not None and (
            isinstance(limit, bool) or not isinstance(limit, int) or limit < 0
        ):
            raise ValidationError(f"limit must be an integer >= 0 or None, not {limit!r}")
        self.run_id = run_id
        self.start_index = start_index
        self.limit = limit
        #: Answers fed so far (the first, then the follow-ups).
        self.answers = 0
        #: The terminal event was delivered: the stream is over.
        self.done = False
        #: The last answer was empty and not terminal: ask again for the same ``start_index``.
        self.polling_gap = False

    def query(self) -> dict[str, str]:
        """The next request's query parameters (``startIndex``). Raises
        :class:`~protocols.errors.ProviderError` (``continuation_limit``, not retryable) when
        the limit of follow-up requests is spent, and
        :class:`~protocols.errors.ValidationError` once the stream is :attr:`done`."""
        if self.done:
            raise ValidationError(f"run {self.run_id}: the stream has ended; nothing follows")
        if self.limit is not None and self.answers > self.limit:
            raise ProviderError(
                f"run {self.run_id}: no terminal event after {self.limit} continuations",
                code="continuation_limit",
                retryable=False,
            )
        return {"startIndex": str(self.start_index)}

    def feed(self, events: Iterable[RunEvent], *, tail_index: int | None = None) -> list[RunEvent]:
        """Take one answer; the events to deliver. ``tail_index``: the answer's tail index
        header, when it has one -- an answer whose body starts after events this client has
        not had raises :class:`~protocols.errors.ProtocolError`."""
        if self.done:
            raise ValidationError(f"run {self.run_id}: the stream has ended; nothing follows")
        if tail_index is not None and tail_index > self.start_index:
            raise ProtocolError(
                f"run {self.run_id}: the answer starts after seq {tail_index}, but this client "
                f"has had only up to {self.start_index}",
                code="decode",
                category=Category.PROVIDER,
            )
        self.answers += 1
        out: list[RunEvent] = []
        for event in events:
            if event.seq <= self.start_index:
                continue  # had already: replay-safe
            out.append(event)
            self.start_index = event.seq
            if event.terminal:
                self.done = True
                break
        self.polling_gap = not out and not self.done
        return out
