"""Each package's public API is pinned: adding or removing a name is a deliberate change here."""

from __future__ import annotations

import types

import pytest

import actors
import protocols

PROTOCOLS_API = [
    "JSON",
    "MAX_COUNT",
    "MAX_DEPTH",
    "THINK_CLOSE",
    "THINK_OPEN",
    "AbortError",
    "AgentResult",
    "GuardrailTrip",
    "AgentsError",
    "Category",
    "Channel",
    "ConfigError",
    "Delta",
    "FinishReason",
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

ACTORS_API = [
    "Guardrail",
    "GuardrailTrip",
    "input_guardrail",
    "output_guardrail",
    "tool_guardrail",
    "A2AAgent",
    "A2AError",
    "A2ATool",
    "AgentBusy",
    "AgentEvent",
    "Chunk",
    "BudgetView",
    "RunContext",
    "RunEvents",
    "RunStep",
    "TeamBudget",
    "Cost",
    "GenAIPrices",
    "PriceTable",
    "Prices",
    "handoff",
    "Abort",
    "Actor",
    "ActorExit",
    "ActorRef",
    "ActorState",
    "ActorStatistics",
    "ActorStopped",
    "Agent",
    "AgentRun",
    "AnthropicMessages",
    "Answerer",
    "AutoShutdown",
    "Backoff",
    "ChildSpec",
    "CompactionError",
    "Conversation",
    "ConversationManager",
    "ConversationStore",
    "CycleError",
    "ExitKind",
    "FallbackProvider",
    "FileSystemWorkspace",
    "GeminiChat",
    "MemoryConversationStore",
    "ModelSettings",
    "OllamaChat",
    "OpenAIChat",
    "OpenAIResponses",
    "PostgresConversationStore",
    "Question",
    "QuestionTool",
    "RelayProvider",
    "RelayServer",
    "RelayToken",
    "ReplyStream",
    "Restart",
    "Runtime",
    "SQLiteConversationStore",
    "StartChild",
    "StoreError",
    "Strategy",
    "Supervisor",
    "SupervisorGaveUp",
    "SupervisorStatistics",
    "TerminateChild",
    "TokenBudget",
    "Tool",
    "ToolRegistry",
    "Unanswered",
    "__version__",
    "ask_user",
    "main",
    "open_runtime",
    "question_tool",
    "summarizer_for",
    "tool",
    "workspace_tools",
]


@pytest.mark.parametrize(
    ("package", "expected"),
    [(protocols, PROTOCOLS_API), (actors, ACTORS_API)],
    ids=["protocols", "actors"],
)
def test_export_list_is_pinned(package: types.ModuleType, expected: list[str]) -> None:
    assert sorted(package.__all__) == sorted(expected)
    assert len(set(package.__all__)) == len(package.__all__)
    for name in package.__all__:
        assert hasattr(package, name), f"{package.__name__}.{name} is listed but missing"


@pytest.mark.parametrize("package", [protocols, actors], ids=["protocols", "actors"])
def test_no_public_name_escapes_the_list(package: types.ModuleType) -> None:
    public = {
        name
        for name, value in vars(package).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public <= set(package.__all__)


def test_every_public_callable_and_class_is_documented() -> None:
    for package in (protocols, actors):
        for name in package.__all__:
            value = getattr(package, name)
            if isinstance(value, type | types.FunctionType):
                assert (value.__doc__ or "").strip(), f"{package.__name__}.{name} has no docstring"


def test_the_doors_export_lists_are_pinned() -> None:
    import actors.aio
    import actors.sync
    import protocols.provider_spec

    door = ["Agent", "JobQueue", "Run", "Runtime", "RuntimeClosed"]
    assert sorted(actors.sync.__all__) == door
    assert sorted(actors.aio.__all__) == door
    assert actors.sync.RuntimeClosed is actors.aio.RuntimeClosed
    assert sorted(protocols.provider_spec.__all__) == [
        "MAX_PROVIDER_STRING",
        "ProviderSpec",
        "VENDORS",
        "Vendor",
        "parse_provider",
        "resolve_provider",
    ]
    for module in (actors.sync, actors.aio):
        for name in module.__all__:
            assert (getattr(module, name).__doc__ or "").strip(), f"{module.__name__}.{name}"


def test_subpackage_export_lists_are_pinned() -> None:
    import actors.agent
    import actors.conversation
    import actors.providers
    import actors.relay
    import actors.store
    import actors.testing
    import actors.tools
    import actors.workspace
    import protocols.accounting
    import protocols.authority
    import protocols.context
    import protocols.faults
    import protocols.history
    import protocols.relay
    import protocols.simulator
    import protocols.toolschema
    import protocols.wire
    import protocols.workspace

    assert sorted(actors.relay.__all__) == [
        "RelayAgents",
        "RelayApprover",
        "RelayJobLimits",
        "RelayJobStatistics",
        "RelayJobs",
        "RelayLimits",
        "RelayProvider",
        "RelayServer",
        "RelayStatistics",
        "RelayToken",
        "serve",
    ]
    assert {"PROTOCOL_VERSION", "Hello", "Stream", "Result", "encode_frame"} <= set(
        protocols.relay.__all__
    )
    assert sorted(actors.testing.__all__) == [
        "Fail",
        "FaultProviderServer",
        "Hang",
        "Reply",
        "ScriptExhausted",
        "ScriptedCall",
        "ScriptedProvider",
        "Simulator",
        "SimulatorStatistics",
    ]
    assert sorted(protocols.simulator.__all__) == [
        "CachePrefix",
        "MAX_COUNT_TO",
        "MEDIA_TYPES",
        "PromptCache",
        "ROUTES",
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
    assert sorted(actors.providers.__all__) == [
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
    assert {"CallFragment", "Increment", "StreamAssembler", "image_media_type"} <= set(
        protocols.wire.__all__
    )
    assert sorted(protocols.faults.__all__) == sorted(
        [
            "FAULT_WIRES",
            "BadJson",
            "ConnectionRefused",
            "FaultStep",
            "FaultWire",
            "HttpError",
            "Pass",
            "Slow",
            "StreamCut",
            "StreamError",
            "TimeoutBeforeFirstByte",
            "UsageMissing",
            "done_event",
            "error_event",
            "gemini_error_body",
            "gemini_error_event",
            "gemini_finish_event",
            "gemini_text_event",
            "parse_plan",
            "responses_completed_event",
            "responses_error_event",
            "responses_start_events",
            "responses_text_event",
            "slow_tokens",
            "text_event",
            "usage_event",
        ]
    )
    assert sorted(actors.conversation.__all__) == [
        "CompactionError",
        "Conversation",
        "ConversationEvent",
        "ConversationManager",
        "DEFAULT_SUMMARY_INSTRUCTION",
        "Summarizer",
        "WindowCheck",
        "summarizer_for",
    ]
    assert sorted(actors.store.__all__) == [
        "ConversationStore",
        "DEFAULT_BUSY_TIMEOUT",
        "DEFAULT_MAX_BYTES",
        "MAX_LIST_LIMIT",
        "MemoryConversationStore",
        "PostgresConversationStore",
        "SCHEMA_VERSION",
        "SQLiteConversationStore",
        "StoreError",
        "open_conversation_store",
    ]
    assert sorted(protocols.history.__all__) == [
        "ConversationSnapshot",
        "History",
        "IMAGE_TOKEN_ESTIMATE",
        "INTERRUPTED_NOTE",
        "MESSAGE_TOKEN_OVERHEAD",
        "RECAP_PREFIX",
        "Section",
        "check_history",
        "estimate_messages",
        "plan_collapse",
        "plan_fold",
        "recap",
        "reference_text",
        "render_for_provider",
        "summary_inputs",
        "unanswered_calls",
    ]
    assert sorted(protocols.workspace.__all__) == [
        "BINARY_MIMES",
        "BinaryContent",
        "BinaryMime",
        "ClearEvent",
        "Content",
        "DEFAULT_MAX_BINARY_SIZE",
        "DEFAULT_MAX_FILES",
        "DEFAULT_MAX_FILE_SIZE",
        "EXTENSION_TO_LANGUAGE",
        "File",
        "FileInfo",
        "FileState",
        "Listing",
        "MAX_PATH_LENGTH",
        "MAX_QUERY_LENGTH",
        "MoveEvent",
        "Position",
        "Range",
        "ReadResult",
        "RemoveEvent",
        "ReplaceResult",
        "SearchMatch",
        "SpliceResult",
        "TextContent",
        "Workspace",
        "WorkspaceError",
        "WorkspaceErrorCode",
        "WorkspaceEvent",
        "WorkspaceListener",
        "WorkspaceManager",
        "WorkspaceSnapshot",
        "WriteEvent",
        "advance",
        "clamp_position",
        "clamp_range",
        "compile_query",
        "end_position",
        "full_range",
        "infer_language",
        "normalize_path",
        "offset_at",
        "position_at",
        "render_fenced",
        "replace_text",
        "search_text",
        "slice_range",
        "splice_range",
    ]
    assert sorted(actors.workspace.__all__) == [
        "DEFAULT_IGNORE",
        "DEFAULT_MAX_DISK_FILES",
        "DEFAULT_MAX_READ_BYTES",
        "DEFAULT_MAX_WRITE_BYTES",
        "FileSystemWorkspace",
        "MemoryBackend",
        "TEMP_PREFIX",
        "WorkspaceBackend",
        "WorkspaceTool",
        "workspace_tools",
    ]
    assert sorted(protocols.context.__all__) == [
        "ContextFormat",
        "DEFAULT_INSTRUCTIONS_OPEN",
        "Instruction",
        "Instructions",
        "Scope",
        "SectionFormat",
        "WORKSPACE_HEADING",
        "build",
        "render_instructions",
    ]
    assert sorted(actors.tools.__all__) == [
        "Approver",
        "CallableTool",
        "INTERRUPTED",
        "NOT_EXECUTED",
        "Tool",
        "ToolBatch",
        "ToolRegistry",
        "tool",
    ]
    import protocols.questions

    assert sorted(protocols.questions.__all__) == [
        "Answer",
        "MAX_ANSWER_CHARS",
        "MAX_OPTIONS",
        "Question",
        "QuestionKind",
        "check_answer",
        "parse_answer",
        "question_from_arguments",
        "question_schema",
    ]
    assert sorted(protocols.authority.__all__) == [
        "Authority",
        "DEFAULT_DENY_REASON",
        "DEFAULT_ZONE",
        "Decision",
        "NO_APPROVER_REASON",
        "REJECTED_REASON",
        "Rule",
        "Verdict",
        "resolve_ask",
    ]
    assert sorted(protocols.toolschema.__all__) == [
        "MAX_PROBLEMS",
        "PartialOutput",
        "ToolSignature",
        "partial_value",
        "schema_for",
        "signature_of",
        "structure_arguments",
        "structure_value",
        "validate_arguments",
    ]
    assert sorted(protocols.accounting.__all__) == [
        "BudgetMeter",
        "BudgetScope",
        "Cost",
        "CostProvenance",
        "MAX_COUNT",
        "PriceTable",
        "Prices",
        "Pricing",
        "TeamBudget",
        "TokenBudget",
        "Usage",
        "estimate_tokens",
        "sanitize_count",
    ]
    assert sorted(actors.agent.__all__) == [
        "Agent",
        "AgentBusy",
        "AgentEvent",
        "AgentRun",
        "AgentStatus",
        "Chunk",
        "CycleError",
        "EXHAUSTED",
        "EXHAUST_INSTRUCTION",
        "FALLBACK_SUMMARY",
        "OUTPUT_FEEDBACK",
        "OUTPUT_INSTRUCTION",
        "OutputError",
        "RunOptions",
        "TOOLS_OFF",
        "UNKNOWN_TOOLS_FALLBACK",
    ]
    import actors.durable
    import protocols.jobs

    assert sorted(actors.durable.__all__) == [
        "Admitted",
        "AgentRegistry",
        "AgentSpec",
        "DEFAULT_MAX_BYTES",
        "JobError",
        "JobEvents",
        "JobFeed",
        "JobQueue",
        "LINGER",
        "MemoryRunStore",
        "PostgresRunStore",
        "RETRY_FOR",
        "RunStore",
        "SQLiteRunStore",
        "StoreJournal",
        "Taken",
        "answer_job",
        "cancel_job",
        "check_store_url",
        "feed_jobs",
        "migrate_store",
        "open_job_queue",
        "open_run_store",
        "purge_job",
        "submit_job",
        "wait_job",
        "watch_job",
    ]
    assert {"AgentJob", "JobRecord", "JobStatus", "replay", "decide", "runnable"} <= set(
        protocols.jobs.__all__
    )
    for module in (
        actors.durable,
        protocols.jobs,
        actors.agent,
        protocols.accounting,
        actors.tools,
        protocols.authority,
        protocols.toolschema,
        actors.workspace,
        protocols.context,
        protocols.workspace,
        actors.conversation,
        actors.store,
        protocols.history,
        actors.providers,
        actors.testing,
        protocols.faults,
        protocols.simulator,
        protocols.wire,
    ):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"
