"""The relay protocol: versioned JSON frames between a credential-free client and a relay server
that holds the model and its credential.

Sans-IO: this module only turns frames into text and text into frames, strictly. The server
(:mod:`actors.relay`) and the client (``RelayProvider``) move the text over a websocket (one JSON
object per message) or, for clients without websockets, over a plain HTTP request whose
response is NDJSON (one server frame per line).

Client to server:

* ``hello`` -- ``version`` (:data:`PROTOCOL_VERSION`, or an older one of :data:`VERSIONS`)
  and ``token`` (the bearer token); the first frame of a connection, and only there. A client
  refused with ``version`` says hello again, on a new connection, with the version before (a
  server from before version 2 knows only 1).
* ``stream`` -- ``id`` (the client's request id, unique among its open requests),
  ``messages``, ``tools``, ``options`` (the call's options and model settings: on a
  connection of version 1, none of :data:`SETTINGS_FIELDS`): one provider call; optionally
  ``trace``, the caller's W3C trace context (``traceparent``, ``tracestate``) for the server's
  span of the call (absent: the connection's handshake headers say it, or nothing does). A
  client never sends
  a tool message's ``images`` (servers from before them refuse the frame): each such message
  says in its text how many images were left out. A server accepts them.
  From version 3, ``cancel_on_disconnect`` (default true, then not sent): false lets the
  request's *run* go on when the connection drops, to be followed again with ``watch``.
* ``cancel`` -- ``id``: stop that request (from version 3 also a watched run); the server
  answers ``abort`` with the partial.
* ``approve`` -- ``id``, ``call`` (a tool-call id), ``decision`` (``allow`` or ``deny``),
  ``reason``: the answer to an ``approval``.
* ``watch`` (version 3) -- ``id`` (a request id of this connection), ``run_id``, ``after`` (a
  seq, default 0): the run's frames after that event -- what the log still holds, then the
  rest as it comes, through its end (a ``gap`` first where the log no longer holds some).
* The durable jobs' frames (version 3, on a relay serving jobs; see
  :mod:`protocols.relay_jobs`), each with an ``id`` (a request id of this connection):
  ``job_submit`` -- ``job`` (what ``POST /v1/jobs`` takes); ``job_get``, ``job_cancel`` --
  ``job_id``; ``job_answer`` -- ``job_id``, ``answers`` (what ``POST /v1/jobs/{id}/answers``
  takes as ``answers``); ``job_watch`` -- ``job_id``, ``after`` (a seq, default 0): the job's
  events after it. A ``cancel`` with a ``job_watch``'s id ends that watch, not the job.

Server to client:

* ``ready`` -- ``version`` (the hello's) and the connection's limits (``max_frame``,
  ``max_streams``; from version 2, ``max_tokens`` when the server caps a request's output
  tokens: it lowers a larger ``max_tokens`` to it, and sets it where none is given).
* ``delta`` -- ``id``, ``channel`` (``content`` or ``thinking``), ``text``.
* ``result`` -- ``id``, ``result`` (the provider result; its ``denied`` maps the tool calls
  the server's policy refused to the text the model must be answered with). A server never sends
  the result's ``model`` and ``response_id``, nor its usage's ``reasoning``, ``cost`` or
  ``cache_write`` (clients from before those fields refuse them), nor in an ``abort``'s
  ``partial``; a client accepts them.
* ``abort`` -- ``id``, ``partial``: the request was cancelled (by the client, or by the
  server's shutdown); what had streamed so far.
* ``error`` -- ``id`` (absent for the connection), ``code`` (one of :data:`ERROR_MESSAGES`),
  ``message`` (the fixed text for that code: an upstream's own message, and any secret, never
  crosses), ``retryable``.
* ``approval`` -- ``id``, ``call`` (the tool call), ``reason``: the server's policy wants a
  human to decide that call; the client answers with ``approve``.
* ``run`` (version 3) -- ``id``, ``run_id``: the request (or the watch) is run ``run_id``, a
  server-minted, unguessable id; sent before any other frame of it.
* ``gap`` (version 3) -- ``id``, ``first``, ``seq``: the run's events ``first`` .. ``seq`` are
  no longer kept; what follows comes after ``seq``.
* ``job`` (version 3) -- ``id``, ``job`` (the job as ``GET /v1/jobs/{id}`` shows it), and on
  the answer to a ``job_submit`` ``created`` (false: the idempotency key named that job
  already). It answers ``job_submit``, ``job_get``, ``job_cancel`` and ``job_answer``, and ends
  a ``job_watch`` that ends before a terminal event (cancelled by the client).
* ``job_event`` (version 3) -- ``id``, ``event`` (one event of the job, as JSON: what its
  Server-Sent Events carry); a terminal one (:data:`~protocols.live.TERMINAL`) ends its
  ``job_watch``.

A job frame refused is answered with an ``error`` of its ``id`` (its code's fixed text: the
HTTP route's answer says more) and the connection goes on.

From version 3, every frame of a run (``delta``, ``approval``, ``result``, ``abort``, and the
``error`` that ends it) carries ``seq``: the seq of the run's event it stands for (see
:mod:`protocols.live`), which a client gives back as ``after`` to resume. A frame of an older
version never has it.

Every frame is validated strictly: an unknown ``type``, an unknown or missing field, a value of
the wrong type, a frame over the size limit or nested too deeply is refused with a
:class:`~protocols.errors.ProtocolError` (a :class:`~protocols.errors.SizeLimitError` for size)
whose category says who sent it.

This module is the protocol's one import path; its parts live in :mod:`protocols._relay_checks`
(constants, field checks), :mod:`protocols._relay_frames` (the frames and their text),
:mod:`protocols._relay_runs` (a run's frames and events) and :mod:`protocols._relay_hosts` (log-safe
values, host names and origins).
"""

from __future__ import annotations

from ._relay_checks import (
    DEFAULT_MAX_FRAME,
    ERROR_MESSAGES,
    HTTP_REQUEST_ID,
    MAX_REQUEST_ID,
    MAX_RUN_ID,
    MAX_SAFE_INTEGER,
    NDJSON_CONTENT_TYPE,
    PROTOCOL_VERSION,
    RUN_ID_HEADER,
    RUN_STATE_HEADER,
    RUNS_VERSION,
    SETTINGS_FIELDS,
    TAIL_INDEX_HEADER,
    TRACE_KEYS,
    VERSIONS,
)
from ._relay_frames import (
    MAX_JOB_ANSWERS,
    AbortFrame,
    ApprovalFrame,
    ApproveFrame,
    CancelFrame,
    ClientFrame,
    DeltaFrame,
    ErrorFrame,
    GapFrame,
    HelloFrame,
    HttpRequest,
    JobAnswerFrame,
    JobCancelFrame,
    JobEventFrame,
    JobFrame,
    JobGetFrame,
    JobSubmitFrame,
    JobWatchFrame,
    ReadyFrame,
    ResultFrame,
    RunFrame,
    ServerFrame,
    StreamFrame,
    WatchFrame,
    _fast_delta,  # noqa: F401 - tests/protocols/test_relay_frames.py reads it here
    decode_client_frame,
    decode_http_request,
    decode_server_frame,
    encode_frame,
    error_frame,
    unsupported_options,
)
from ._relay_hosts import (
    LOOPBACK_NAMES,  # noqa: F401 - a constant of this module before the split
    HostPolicy,
    is_loopback,
    loggable,
    parse_origin,
    split_host,
)
from ._relay_runs import (
    DEFAULT_CONTINUATION_LIMIT,
    RUN_ERROR_TYPE,
    RunContinuation,
    event_frame,
    frame_events,
    parse_start_index,
    run_event_json,
    run_event_sse,
    with_seq,
)

__all__ = [
    "DEFAULT_CONTINUATION_LIMIT",
    "DEFAULT_MAX_FRAME",
    "ERROR_MESSAGES",
    "HTTP_REQUEST_ID",
    "MAX_JOB_ANSWERS",
    "MAX_REQUEST_ID",
    "MAX_RUN_ID",
    "MAX_SAFE_INTEGER",
    "NDJSON_CONTENT_TYPE",
    "PROTOCOL_VERSION",
    "RUNS_VERSION",
    "RUN_ERROR_TYPE",
    "RUN_ID_HEADER",
    "RUN_STATE_HEADER",
    "SETTINGS_FIELDS",
    "TAIL_INDEX_HEADER",
    "TRACE_KEYS",
    "VERSIONS",
    "Abort",
    "AbortFrame",
    "Approval",
    "ApprovalFrame",
    "Approve",
    "ApproveFrame",
    "Cancel",
    "CancelFrame",
    "ClientFrame",
    "Delta",
    "DeltaFrame",
    "Error",
    "ErrorFrame",
    "GapFrame",
    "Hello",
    "HelloFrame",
    "HostPolicy",
    "HttpRequest",
    "JobAnswerFrame",
    "JobCancelFrame",
    "JobEventFrame",
    "JobFrame",
    "JobGetFrame",
    "JobSubmitFrame",
    "JobWatchFrame",
    "Ready",
    "ReadyFrame",
    "Result",
    "ResultFrame",
    "RunContinuation",
    "RunFrame",
    "ServerFrame",
    "Stream",
    "StreamFrame",
    "WatchFrame",
    "decode_client_frame",
    "decode_http_request",
    "decode_server_frame",
    "encode_frame",
    "error_frame",
    "event_frame",
    "frame_events",
    "is_loopback",
    "loggable",
    "parse_origin",
    "parse_start_index",
    "run_event_json",
    "run_event_sse",
    "split_host",
    "unsupported_options",
    "with_seq",
]


# The frames' names before each said it was a frame (``Abort`` and ``Delta`` also name the cancel
# token and the provider's delta): kept, so imports written against them still work.
Hello = HelloFrame
Stream = StreamFrame
Cancel = CancelFrame
Approve = ApproveFrame
Ready = ReadyFrame
Delta = DeltaFrame
Result = ResultFrame
Abort = AbortFrame
Error = ErrorFrame
Approval = ApprovalFrame
