"""trio-agents' sans-IO core: the data model, strict JSON and the codec, stream decoders and think
splitting. Nothing in this package awaits, owns a task, or touches a socket or disk.

Everything public is re-exported here; see ``docs/protocols.md`` for a guided tour.
"""

from ._json import JSON as JSON
from ._json import MAX_DEPTH as MAX_DEPTH
from ._json import check_json as check_json
from ._json import dumpb as dumpb
from ._json import dumps as dumps
from ._json import loads as loads
from .accounting import MAX_COUNT as MAX_COUNT
from .accounting import estimate_tokens as estimate_tokens
from .accounting import sanitize_count as sanitize_count
from .codec import converter as converter
from .codec import decode as decode
from .codec import encode as encode
from .codec import from_json as from_json
from .codec import to_json as to_json
from .errors import AbortError as AbortError
from .errors import AgentsError as AgentsError
from .errors import Category as Category
from .errors import ConfigError as ConfigError
from .errors import ProtocolError as ProtocolError
from .errors import ProviderError as ProviderError
from .errors import SizeLimitError as SizeLimitError
from .errors import ToolError as ToolError
from .errors import ValidationError as ValidationError
from .live import RunEvent as RunEvent
from .live import event_from_json as event_from_json
from .live import event_to_json as event_to_json
from .messages import AgentResult as AgentResult
from .messages import Channel as Channel
from .messages import Delta as Delta
from .messages import FinishReason as FinishReason
from .messages import GuardrailTrip as GuardrailTrip
from .messages import Message as Message
from .messages import ProviderOptions as ProviderOptions
from .messages import ProviderResult as ProviderResult
from .messages import Role as Role
from .messages import StopReason as StopReason
from .messages import ToolCall as ToolCall
from .messages import ToolDefinition as ToolDefinition
from .messages import ToolFailure as ToolFailure
from .messages import ToolResult as ToolResult
from .messages import ToolSuccess as ToolSuccess
from .messages import Usage as Usage
from .messages import new_id as new_id
from .ndjson import NDJSONDecoder as NDJSONDecoder
from .partial_json import PartialJSON as PartialJSON
from .settings import ModelSettings as ModelSettings
from .sse import SSEComment as SSEComment
from .sse import SSEDecoder as SSEDecoder
from .sse import SSEEvent as SSEEvent
from .think import THINK_CLOSE as THINK_CLOSE
from .think import THINK_OPEN as THINK_OPEN
from .think import ThinkSplitter as ThinkSplitter

__all__ = [
    "JSON",
    "MAX_COUNT",
    "MAX_DEPTH",
    "THINK_CLOSE",
    "THINK_OPEN",
    "AbortError",
    "AgentResult",
    "AgentsError",
    "Category",
    "Channel",
    "ConfigError",
    "Delta",
    "FinishReason",
    "GuardrailTrip",
    "Message",
    "ModelSettings",
    "NDJSONDecoder",
    "PartialJSON",
    "ProtocolError",
    "ProviderError",
    "ProviderOptions",
    "ProviderResult",
    "Role",
    "RunEvent",
    "SSEComment",
    "SSEDecoder",
    "SSEEvent",
    "SizeLimitError",
    "StopReason",
    "ThinkSplitter",
    "ToolCall",
    "ToolDefinition",
    "ToolError",
    "ToolFailure",
    "ToolResult",
    "ToolSuccess",
    "Usage",
    "ValidationError",
    "check_json",
    "converter",
    "decode",
    "dumpb",
    "dumps",
    "encode",
    "estimate_tokens",
    "event_from_json",
    "event_to_json",
    "from_json",
    "loads",
    "new_id",
    "sanitize_count",
    "to_json",
]
