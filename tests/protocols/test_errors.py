"""The error taxonomy: codes, categories, retryability and what each error carries."""

from __future__ import annotations

import pytest

from protocols.errors import (
    AbortError,
    AgentsError,
    Category,
    ConfigError,
    ProtocolError,
    ProviderError,
    SizeLimitError,
    ToolError,
    ValidationError,
)
from protocols.messages import ProviderResult


@pytest.mark.parametrize(
    ("error", "code", "category", "retryable"),
    [
        (AgentsError("x"), "error", Category.SYSTEM, False),
        (ValidationError("x"), "invalid", Category.USER, False),
        (ConfigError("x"), "config", Category.USER, False),
        (ProtocolError("x"), "protocol", Category.PROVIDER, False),
        (SizeLimitError("frame", limit=10, size=11), "too_large", Category.PROVIDER, False),
        (ProviderError("x"), "provider_error", Category.PROVIDER, False),
        (ToolError("x"), "tool_error", Category.USER, False),
        (AbortError("x", partial=ProviderResult()), "aborted", Category.USER, False),
    ],
)
def test_defaults(error: AgentsError, code: str, category: Category, retryable: bool) -> None:
    assert isinstance(error, AgentsError)
    assert (error.code, error.category, error.retryable) == (code, category, retryable)


def test_overrides_and_hierarchy() -> None:
    error = ProviderError("rate limited", code="rate_limit", retryable=True, status=429)
    assert (error.code, error.retryable, error.status) == ("rate_limit", True, 429)
    assert issubclass(SizeLimitError, ProtocolError)
    assert issubclass(ValidationError, ValueError)
    relayed = ProtocolError("bad frame", category=Category.USER)
    assert relayed.category is Category.USER


def test_provider_error_keeps_a_bounded_excerpt_and_a_safe_repr() -> None:
    error = ProviderError(
        "provider error: 400",
        status=400,
        vendor_type="invalid_request_error",
        vendor_code="context_length_exceeded",
        excerpt="x" * 10_000,
        retry_after=1.5,
    )
    assert len(error.excerpt) == 2048
    assert error.vendor_code == "context_length_exceeded"
    assert error.retry_after == 1.5
    assert "x" * 100 not in repr(error)
    assert repr(error) == (
        "ProviderError(code='provider_error', status=400, retryable=False, "
        "message='provider error: 400')"
    )


def test_size_limit_error_reports_limit_and_size() -> None:
    error = SizeLimitError("SSE event", limit=1024, size=2000)
    assert (error.limit, error.size) == (1024, 2000)
    assert str(error) == "SSE event exceeds the limit of 1024 bytes (at least 2000 bytes)"


def test_abort_and_tool_errors_carry_context() -> None:
    partial = ProviderResult(content="half an ans")
    abort = AbortError("cancelled mid-stream", partial=partial, reason="timeout")
    assert abort.partial is partial
    assert abort.reason == "timeout"
    tool = ToolError("bad arguments", code="tool_invalid", tool="add", call_id="c1")
    assert (tool.code, tool.tool, tool.call_id) == ("tool_invalid", "add", "c1")
    assert repr(tool) == "ToolError(code='tool_invalid', message='bad arguments')"


def test_size_limit_error_takes_a_category() -> None:
    assert SizeLimitError("frame", limit=1, size=2).category is Category.PROVIDER
    relayed = SizeLimitError("frame", limit=1, size=2, category=Category.USER)
    assert relayed.category is Category.USER
