"""The simulator's model: a deterministic answering policy and the five wire formats it answers in.

Pure functions, no I/O: :func:`parse_request` reads a request body of one of the wire formats
(OpenAI chat completions, OpenAI's Responses API, Anthropic Messages, Ollama's native chat,
Google's Gemini API -- whose model and streaming are in the path: :func:`match_route`)
into a :class:`SimRequest`, :func:`answer` decides what a (very small) model would say to it, and
:func:`stream_frames` / :func:`response_body` write that answer as the vendor's streamed records or
its one-shot JSON body. The server in ``actors.testing.Simulator`` only moves these bytes.

The policy, applied to the last message of the conversation:

* After tool results (the last message is a tool message): it answers from them --
  ``"The answer is 42."`` for one result, ``"The tools returned: 1, 2."`` for several.
* A user message containing ``call <tool>`` (optionally ``call <tool> with {json object}``) for an
  advertised tool: one call to that tool per mention, in order (several mentions make parallel
  calls). ``call add with {"a": 1, "b": 2}`` calls ``add`` with those arguments.
* A user message containing sums such as ``19 + 23``: with an advertised ``add`` tool, one ``add``
  call per sum with ``{"a": 19, "b": 23}``; without one, the sums are answered directly
  (``"19 + 23 = 42."``).
* ``tool_choice`` is honoured: ``none`` hides the tools, a tool name restricts them to that tool,
  and ``required`` (or a name) with nothing else to call calls that tool with ``{}``.
* ``count to N`` answers ``1 2 3 ... N``, one number per delta (``N`` up to :data:`MAX_COUNT_TO`).
* Anything else is echoed: ``You said: <text>``, one word per delta.
* When the request asks for reasoning (Anthropic ``thinking``, Ollama ``think``, OpenAI-compatible
  ``reasoning_effort`` or ``chat_template_kwargs.enable_thinking``, a Responses API ``reasoning``
  object), a short thinking text saying what it is about to do comes first: as native reasoning
  (Anthropic thinking blocks with a signature, Ollama ``message.thinking``, OpenAI
  ``reasoning_content`` with the ``"field"`` style, a Responses reasoning summary with
  ``encrypted_content``) or inline ``<think>...</think>`` content (the OpenAI ``"tags"`` style,
  like llama.cpp serving a reasoning model).
* An output-token cap (``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``, Ollama
  ``num_predict``, or the server's own, :func:`answer`'s ``max_tokens``) smaller than the answer
  cuts it to that many deltas with finish reason ``length`` (a Responses API stream ends with
  ``response.incomplete``); tool calls are cut where their arguments' tokens pass the cap, the
  call it falls in sent with its arguments' JSON text cut (Ollama: as a string).
* A content filter (:func:`answer`'s ``blocked`` words) cuts the answer just before the first
  blocked word with the vendor's filter finish (``content_filter``; Anthropic ``refusal``).
* It records the model settings a request gave (:attr:`SimRequest.settings`), read back from
  the vendor's names -- ``max_completion_tokens``/``max_tokens``, ``max_output_tokens``,
  ``stop_sequences``, Ollama's ``options``, a ``reasoning`` effort, ``parallel_tool_calls``
  or Anthropic's ``disable_parallel_tool_use`` -- with the keys it does not know as ``extra``;
  Anthropic's thinking budget is :attr:`SimRequest.thinking_budget`. It answers the same
  whatever they say, beyond the output-token cap.
* Usage: prompt tokens estimate the request's text (:func:`~protocols.accounting.estimate_tokens`);
  completion tokens count the deltas plus the estimate of the thinking and call arguments.
  A :class:`PromptCache` (the server keeps one) then reports the part of the prompt a previous
  request cached, as the vendor does: Anthropic's ``cache_read_input_tokens`` and
  ``cache_creation_input_tokens`` for the prefixes ``cache_control`` marks, OpenAI's
  ``cached_tokens`` for any repeated prefix (:attr:`SimRequest.prefixes`).

A tool whose schema is not ``"type": "object"`` at its root, or has ``anyOf``, ``oneOf`` or
``allOf`` there, makes the request invalid, as OpenAI's and Anthropic's APIs refuse those.

Identifiers are derived from a caller-supplied sequence number, so equal inputs give equal bytes.
"""

from ._answer import error_body as error_body
from ._answer import response_body as response_body
from ._answer import stream_frames as stream_frames
from ._cache import CachePrefix as CachePrefix
from ._cache import PromptCache as PromptCache
from ._gemini import match_route as match_route
from ._policy import answer as answer
from ._request import parse_request as parse_request
from ._types import MAX_COUNT_TO as MAX_COUNT_TO
from ._types import MEDIA_TYPES as MEDIA_TYPES
from ._types import ROUTES as ROUTES
from ._types import SimAnswer as SimAnswer
from ._types import SimCall as SimCall
from ._types import SimRequest as SimRequest
from ._types import SimTurn as SimTurn
from ._types import ThinkStyle as ThinkStyle
from ._types import Vendor as Vendor

__all__ = [
    "MAX_COUNT_TO",
    "MEDIA_TYPES",
    "ROUTES",
    "CachePrefix",
    "PromptCache",
    "SimAnswer",
    "SimCall",
    "SimRequest",
    "SimTurn",
    "ThinkStyle",
    "Vendor",
    "answer",
    "error_body",
    "match_route",
    "parse_request",
    "response_body",
    "stream_frames",
]
