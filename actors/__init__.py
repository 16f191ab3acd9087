"""trio-agents' trio runtime: everything that waits, owns a task, or talks to a socket or disk.

The actor core lives here: cancel tokens (:class:`Abort`), actors and their refs, supervisors and
the runtime root (:func:`open_runtime`); conversations (:class:`Conversation`, their manager and
stores) run on it, and providers live in :mod:`actors.providers`. Agents run on top of them,
and the relay (:mod:`actors.relay`) lets credential-free clients drive a model; the data model
they all speak lives in :mod:`protocols`.
"""

from protocols.accounting import Cost as Cost
from protocols.accounting import Prices as Prices
from protocols.accounting import PriceTable as PriceTable
from protocols.accounting import TeamBudget as TeamBudget
from protocols.accounting import TokenBudget as TokenBudget
from protocols.messages import GuardrailTrip as GuardrailTrip
from protocols.questions import Question as Question
from protocols.settings import ModelSettings as ModelSettings

from ._core._abort import Abort as Abort
from ._core._actor import Actor as Actor
from ._core._actor import ActorExit as ActorExit
from ._core._actor import ActorRef as ActorRef
from ._core._actor import ActorState as ActorState
from ._core._actor import ActorStatistics as ActorStatistics
from ._core._actor import ActorStopped as ActorStopped
from ._core._actor import ExitKind as ExitKind
from ._core._actor import ReplyStream as ReplyStream
from ._core._supervisor import AutoShutdown as AutoShutdown
from ._core._supervisor import Backoff as Backoff
from ._core._supervisor import ChildSpec as ChildSpec
from ._core._supervisor import Restart as Restart
from ._core._supervisor import StartChild as StartChild
from ._core._supervisor import Strategy as Strategy
from ._core._supervisor import Supervisor as Supervisor
from ._core._supervisor import SupervisorGaveUp as SupervisorGaveUp
from ._core._supervisor import SupervisorStatistics as SupervisorStatistics
from ._core._supervisor import TerminateChild as TerminateChild
from ._delegation import handoff as handoff
from ._live import RunEvents as RunEvents
from ._pricing import GenAIPrices as GenAIPrices
from ._questions import Answerer as Answerer
from ._questions import QuestionTool as QuestionTool
from ._questions import Unanswered as Unanswered
from ._questions import ask_user as ask_user
from ._questions import question_tool as question_tool
from ._run_context import BudgetView as BudgetView
from ._run_context import RunContext as RunContext
from ._run_context import RunStep as RunStep
from ._runtime import Runtime as Runtime
from ._runtime import open_runtime as open_runtime
from ._version import __version__ as __version__
from .a2a import A2AAgent as A2AAgent
from .a2a import A2AError as A2AError
from .a2a import A2ATool as A2ATool
from .agent import Agent as Agent
from .agent import AgentBusy as AgentBusy
from .agent import AgentEvent as AgentEvent
from .agent import AgentRun as AgentRun
from .agent import Chunk as Chunk
from .agent import CycleError as CycleError
from .cli import main as main
from .conversation import CompactionError as CompactionError
from .conversation import Conversation as Conversation
from .conversation import ConversationManager as ConversationManager
from .conversation import summarizer_for as summarizer_for
from .guardrails import Guardrail as Guardrail
from .guardrails import input_guardrail as input_guardrail
from .guardrails import output_guardrail as output_guardrail
from .guardrails import tool_guardrail as tool_guardrail
from .providers import AnthropicMessages as AnthropicMessages
from .providers import FallbackProvider as FallbackProvider
from .providers import GeminiChat as GeminiChat
from .providers import OllamaChat as OllamaChat
from .providers import OpenAIChat as OpenAIChat
from .providers import OpenAIResponses as OpenAIResponses
from .relay import RelayProvider as RelayProvider
from .relay import RelayServer as RelayServer
from .relay import RelayToken as RelayToken
from .store import ConversationStore as ConversationStore
from .store import MemoryConversationStore as MemoryConversationStore
from .store import PostgresConversationStore as PostgresConversationStore
from .store import SQLiteConversationStore as SQLiteConversationStore
from .store import StoreError as StoreError
from .tools import Tool as Tool
from .tools import ToolRegistry as ToolRegistry
from .tools import tool as tool
from .workspace import FileSystemWorkspace as FileSystemWorkspace
from .workspace import workspace_tools as workspace_tools

__all__ = [
    "A2AAgent",
    "A2AError",
    "A2ATool",
    "Abort",
    "Actor",
    "ActorExit",
    "ActorRef",
    "ActorState",
    "ActorStatistics",
    "ActorStopped",
    "Agent",
    "AgentBusy",
    "AgentEvent",
    "AgentRun",
    "Answerer",
    "AnthropicMessages",
    "AutoShutdown",
    "Backoff",
    "BudgetView",
    "ChildSpec",
    "Chunk",
    "CompactionError",
    "Conversation",
    "ConversationManager",
    "ConversationStore",
    "Cost",
    "CycleError",
    "ExitKind",
    "FallbackProvider",
    "FileSystemWorkspace",
    "GeminiChat",
    "GenAIPrices",
    "Guardrail",
    "GuardrailTrip",
    "MemoryConversationStore",
    "ModelSettings",
    "OllamaChat",
    "OpenAIChat",
    "OpenAIResponses",
    "PostgresConversationStore",
    "PriceTable",
    "Prices",
    "Question",
    "QuestionTool",
    "RelayProvider",
    "RelayServer",
    "RelayToken",
    "ReplyStream",
    "Restart",
    "RunContext",
    "RunEvents",
    "RunStep",
    "Runtime",
    "SQLiteConversationStore",
    "StartChild",
    "StoreError",
    "Strategy",
    "Supervisor",
    "SupervisorGaveUp",
    "SupervisorStatistics",
    "TeamBudget",
    "TerminateChild",
    "TokenBudget",
    "Tool",
    "ToolRegistry",
    "Unanswered",
    "__version__",
    "ask_user",
    "handoff",
    "input_guardrail",
    "main",
    "open_runtime",
    "output_guardrail",
    "question_tool",
    "summarizer_for",
    "tool",
    "tool_guardrail",
    "workspace_tools",
]
