"""Providers: the inference boundary and the HTTP engine with its vendor adapters."""

from ._connection import ConnectionStatistics as ConnectionStatistics
from ._connection import ProviderConnection as ProviderConnection
from ._fallback import FallbackEvent as FallbackEvent
from ._fallback import FallbackOn as FallbackOn
from ._fallback import FallbackProvider as FallbackProvider
from ._fallback import FallbackReason as FallbackReason
from ._fallback import observe_fallbacks as observe_fallbacks
from ._gemini import GeminiChat as GeminiChat
from ._http import HTTPProvider as HTTPProvider
from ._http import RetryPolicy as RetryPolicy
from ._http import Timeouts as Timeouts
from ._http import WireFormat as WireFormat
from ._interface import ProviderInterface as ProviderInterface
from ._interface import ProviderStream as ProviderStream
from ._interface import RetryEvent as RetryEvent
from ._interface import StreamingProvider as StreamingProvider
from ._interface import TextStream as TextStream
from ._interface import observe_retries as observe_retries
from ._spec import provider_from_string as provider_from_string
from ._vendors import AnthropicMessages as AnthropicMessages
from ._vendors import OllamaChat as OllamaChat
from ._vendors import OpenAIChat as OpenAIChat
from ._vendors import OpenAIResponses as OpenAIResponses

__all__ = [
    "AnthropicMessages",
    "ConnectionStatistics",
    "FallbackEvent",
    "FallbackOn",
    "FallbackProvider",
    "FallbackReason",
    "GeminiChat",
    "HTTPProvider",
    "OllamaChat",
    "OpenAIChat",
    "OpenAIResponses",
    "ProviderConnection",
    "ProviderInterface",
    "ProviderStream",
    "RetryEvent",
    "RetryPolicy",
    "StreamingProvider",
    "TextStream",
    "Timeouts",
    "WireFormat",
    "observe_fallbacks",
    "observe_retries",
    "provider_from_string",
]
