"""Provider strings, pure: ``VENDOR:MODEL`` and the settings each vendor reads from the
environment (protocols.provider_spec), without an event loop."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.errors import ConfigError
from protocols.provider_spec import (
    MAX_PROVIDER_STRING,
    VENDORS,
    ProviderSpec,
    parse_provider,
    resolve_provider,
)

KEY = "sk-test-0123456789abcdef"


@pytest.mark.parametrize(
    ("text", "vendor", "model"),
    [
        ("openai:gpt-4.1-mini", "openai", "gpt-4.1-mini"),
        ("openai-responses:o4-mini", "openai-responses", "o4-mini"),
        ("anthropic:claude-sonnet-4-5", "anthropic", "claude-sonnet-4-5"),
        ("ollama:qwen3:8b", "ollama", "qwen3:8b"),  # the model keeps its own colons
        ("openai:Qwen/Qwen3-8B", "openai", "Qwen/Qwen3-8B"),
    ],
)
def test_a_provider_string_is_a_vendor_and_a_model(text: str, vendor: str, model: str) -> None:
    assert parse_provider(text) == (vendor, model)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("gpt-4.1-mini", "without ':'"),
        ("", "without ':'"),
        ("openai:", "the model is missing"),
        ("azure:gpt-4", "unknown provider 'azure'"),
        ("OpenAI:gpt-4", "unknown provider a vendor"),  # vendors are lower case; not repeated
        ("openai:gpt 4", "no spaces or control characters"),
        ("openai:gpt-4\n", "no spaces or control characters"),
        ("openai:" + "m" * MAX_PROVIDER_STRING, "characters"),
    ],
)
def test_a_bad_provider_string_is_one_clear_error(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as raised:
        parse_provider(text)
    assert "VENDOR:MODEL" in str(raised.value)
    assert all(vendor in str(raised.value) for vendor in VENDORS)


def test_something_not_a_string_is_refused() -> None:
    with pytest.raises(ConfigError, match="got bytes"):
        parse_provider(b"openai:gpt-4")  # type: ignore[arg-type]


def test_openai_reads_its_key_and_base_url() -> None:
    spec = resolve_provider("openai:gpt-4.1-mini", {"OPENAI_API_KEY": KEY})
    assert spec == ProviderSpec("openai", "gpt-4.1-mini", "https://api.openai.com/v1", KEY)
    custom = {"OPENAI_API_KEY": KEY, "OPENAI_BASE_URL": "https://proxy.example/v1"}
    assert resolve_provider("openai-responses:o4-mini", custom).base_url == (
        "https://proxy.example/v1"
    )


@pytest.mark.parametrize(
    ("text", "variable", "environ"),
    [
        ("openai:gpt-4.1-mini", "OPENAI_API_KEY", {}),
        ("openai-responses:o4-mini", "OPENAI_API_KEY", {"OPENAI_API_KEY": ""}),
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY", {"OPENAI_API_KEY": KEY}),
        ("anthropic:claude-sonnet-4-5", "ANTHROPIC_API_KEY", {"ANTHROPIC_API_KEY": "  "}),
    ],
)
def test_a_missing_key_is_one_error_naming_its_variable(
    text: str, variable: str, environ: dict[str, str]
) -> None:
    with pytest.raises(ConfigError, match=f"set the environment variable {variable}") as raised:
        resolve_provider(text, environ)
    assert raised.value.code == "missing_key"
    assert text in str(raised.value)


def test_another_openai_compatible_server_needs_no_key() -> None:
    local = {"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"}
    spec = resolve_provider("openai:Qwen/Qwen3-8B", local)
    assert (spec.base_url, spec.api_key) == ("http://127.0.0.1:8000/v1", "")


def test_anthropic_reads_its_key() -> None:
    spec = resolve_provider("anthropic:claude-sonnet-4-5", {"ANTHROPIC_API_KEY": KEY})
    assert (spec.vendor, spec.base_url, spec.api_key) == (
        "anthropic",
        "https://api.anthropic.com",
        KEY,
    )


@pytest.mark.parametrize(
    ("host", "base_url"),
    [
        (None, "http://127.0.0.1:11434"),
        ("10.0.0.5:11434", "http://10.0.0.5:11434"),  # as Ollama writes it: no scheme
        ("https://ollama.internal", "https://ollama.internal"),
    ],
)
def test_ollama_reads_its_host_and_needs_no_key(host: str | None, base_url: str) -> None:
    environ = {} if host is None else {"OLLAMA_HOST": host}
    assert resolve_provider("ollama:qwen3:8b", environ) == ProviderSpec(
        "ollama", "qwen3:8b", base_url, ""
    )


def test_the_key_never_shows_in_a_repr() -> None:
    spec = resolve_provider("openai:gpt-4.1-mini", {"OPENAI_API_KEY": KEY})
    assert KEY not in repr(spec)
    assert "<redacted>" in repr(spec)


SECRETS = st.text(alphabet=string.ascii_letters + string.digits, min_size=8, max_size=40).map(
    lambda tail: f"sk-{tail}"
)


@given(secret=SECRETS, vendor=st.text(max_size=40), spaced=st.booleans())
def test_no_error_repeats_a_string_that_does_not_parse(
    secret: str, vendor: str, spaced: bool
) -> None:
    # A key pasted where a provider string goes is never repeated, nor the model of a string
    # naming an unknown vendor (of which only a vendor-like word may be).
    candidates = [secret, f"{secret} "]
    named = f"{vendor}:{secret}"
    if named.partition(":")[0] not in VENDORS:  # (a known vendor's model may be any word)
        candidates.append(named)
    if spaced:
        candidates.append(f"openai:{secret}\t")
    for candidate in candidates:
        with pytest.raises(ConfigError) as raised:
            parse_provider(candidate)
        assert "sk-" not in str(raised.value)


@given(key=SECRETS, other=SECRETS, vendor=st.sampled_from(["openai", "anthropic"]))
def test_no_error_repeats_a_variable_value(key: str, other: str, vendor: str) -> None:
    # The key that is needed is blank; every other variable holds something secret-like.
    environ = {
        "OPENAI_API_KEY": "" if vendor == "openai" else key,
        "ANTHROPIC_API_KEY": " " if vendor == "anthropic" else key,
        "OLLAMA_HOST": other,
        "UNRELATED": other,
    }
    with pytest.raises(ConfigError) as raised:
        resolve_provider(f"{vendor}:model", environ)
    assert "sk-" not in str(raised.value)
    assert raised.value.code == "missing_key"
