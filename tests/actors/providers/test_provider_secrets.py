"""The API key never leaves a provider in an error, whatever error path the upstream takes.

A property: an upstream echoes the key -- in an error status body, in an in-stream error record
after a 200 (before or after some text was shown), in a record that fails to decode, in the
vendor's error type and code -- for each adapter, over real loopback sockets (the fault server
for its OpenAI steps, a one-response server for the vendors' own records built from the
recorded transcripts in tests/fixtures). The key, padded so it straddles every cut an error
message makes, must not appear in the error's ``str``, ``repr``, ``args``, message, excerpt,
vendor labels or chained exceptions, in a retry event, or in a logged traceback.

"Appear" is the rule of ``protocols.errors.redact``: a key of 8 characters or more appears if it
is anywhere in the text (and for a generated ``sk-`` key, if any 8 characters of it are); a
shorter key appears if it stands as a whole token. A key that is not a generated ``sk-`` key may
be what the library writes itself ("400" in "status=400"; "Provider" in "ProviderError", a word
hypothesis takes from the code): it has leaked only if it shows more often than in a control run
where the upstream echoes something else.
"""

from __future__ import annotations

import json
import logging
import pathlib
import traceback
from typing import Any

import attrs
import h11
import trio
from hypothesis import example, given, settings
from hypothesis import strategies as st

from actors.providers import (
    AnthropicMessages,
    GeminiChat,
    HTTPProvider,
    OllamaChat,
    OpenAIChat,
    RetryEvent,
    RetryPolicy,
    observe_retries,
)
from actors.testing import FaultProviderServer
from actors.testing._loopback import Exchange, LoopbackServer, RequestTooLarge
from protocols import Message, ProviderError
from protocols.errors import ANYWHERE_LENGTH

FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "tests" / "fixtures"
QUICK = RetryPolicy(retries=1, initial=1e-6, maximum=1e-6)
Vendor = str


class RecordServer(LoopbackServer):
    """Answers every request with one fixed response."""

    kind = "record server"

    def __init__(self, status: int, content_type: str, body: bytes) -> None:
        super().__init__()
        self.status, self.content_type, self.body = status, content_type, body

    async def _handle(self, stream: trio.SocketStream) -> None:
        async with stream:
            exchange = Exchange(stream, 1024 * 1024)
            try:
                if await exchange.read_request() is None:
                    return
            except RequestTooLarge:
                return
            headers = [("content-type", self.content_type), ("connection", "close")]
            await exchange.send(h11.Response(status_code=self.status, headers=headers))
            await exchange.send(h11.Data(data=self.body))
            await exchange.send(h11.EndOfMessage())


def standalone(key: str, text: str) -> int:
    """How many times ``key`` stands in ``text`` as a whole token (not next to a letter, a
    digit, ``_`` or one of its own characters)."""
    count = 0
    start = text.find(key)
    while start >= 0:
        end = start + len(key)
        around = (text[start - 1] if start else "", text[end] if end < len(text) else "")
        if all(not (c.isalnum() or c == "_" or c in key) for c in around if c):
            count += 1
        start = text.find(key, start + 1)
    return count


def appears(key: str, text: str) -> bool:
    """Whether ``key`` shows in ``text`` (see the module docstring)."""
    if len(key) >= ANYWHERE_LENGTH:
        if key.startswith("sk-"):
            windows = {key[i : i + ANYWHERE_LENGTH] for i in range(len(key) - ANYWHERE_LENGTH + 1)}
            return any(window in text for window in windows)
        return key in text
    return standalone(key, text) > 0


def texts_of(error: BaseException) -> list[str]:
    """Every text an error offers, its chain's included."""
    texts: list[str] = []
    seen: set[int] = set()
    stack: list[BaseException] = [error]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        texts += [str(current), repr(current), *(repr(arg) for arg in current.args)]
        texts += [str(value) for value in vars(current).values() if isinstance(value, str)]
        stack += [e for e in (current.__cause__, current.__context__) if e is not None]
    texts.append("".join(traceback.format_exception(error)))
    return texts


# --------------------------------------------------------------------------- upstream answers


def sse(*records: tuple[str | None, Any]) -> bytes:
    out = b""
    for event, data in records:
        if event:
            out += f"event: {event}\n".encode()
        text = data if isinstance(data, str) else json.dumps(data)
        out += f"data: {text}\n\n".encode()
    return out


def fixture_records(vendor: Vendor, shown: bool) -> bytes:
    """The recorded transcript of a stream that failed, up to (without) its error record; with
    ``shown`` false, only what precedes the first text."""
    name = {
        "openai": "openai_chat/error.sse",
        "anthropic": "anthropic/error.sse",
        "gemini": "gemini/error.sse",
    }.get(vendor, "ollama/error.ndjson")
    raw = (FIXTURES / name).read_bytes()
    separator = {"ollama": b"\n", "gemini": b"\r\n\r\n"}.get(vendor, b"\n\n")
    records = [record for record in raw.split(separator) if record.strip()][:-1]
    if not shown:
        records = records[:1] if vendor == "anthropic" else []
    return b"".join(record + separator for record in records)


def status_body(vendor: Vendor, message: str, label: str) -> bytes:
    if vendor == "gemini":
        return json.dumps({"error": {"code": 400, "message": message, "status": label}}).encode()
    if vendor == "openai":
        return json.dumps({"error": {"message": message, "type": label, "code": label}}).encode()
    if vendor == "anthropic":
        return json.dumps({"type": "error", "error": {"type": label, "message": message}}).encode()
    return json.dumps({"error": message}).encode()


def stream_error(vendor: Vendor, message: str, label: str) -> bytes:
    if vendor == "gemini":
        record = {"error": {"code": 500, "message": message, "status": label}}
        return b"data: " + json.dumps(record).encode() + b"\r\n\r\n"
    if vendor == "openai":
        return sse((None, {"error": {"message": message, "type": label, "code": label}}))
    if vendor == "anthropic":
        return sse(("error", {"type": "error", "error": {"type": label, "message": message}}))
    return json.dumps({"error": message}).encode() + b"\n"


def undecodable(vendor: Vendor, message: str) -> bytes:
    if vendor == "gemini":
        return b'data: {"candidates": [' + message.encode() + b"\r\n\r\n"
    if vendor == "openai":
        return sse((None, '{"choices": [' + message))
    if vendor == "anthropic":
        return sse(("content_block_delta", '{"type": "content_block_delta", ' + message))
    return b'{"message": {"content": ' + message.encode() + b"\n"


@attrs.frozen
class Case:
    vendor: Vendor
    path: str  # "status", "stream", "stream-shown", "decode", "fault-*"
    key: str
    pad: int
    label: bool  # the key is also the vendor's error type and code
    status: int


keys = st.one_of(
    st.builds(lambda tail: "sk-" + tail, st.text("abcXYZ019_-", min_size=5, max_size=60)),
    st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12),
    st.sampled_from(["x", "none", "EMPTY", "sk-abc_123", "a.b*c", "(?:)", "\\"]),
)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    vendor = draw(st.sampled_from(["openai", "anthropic", "ollama", "gemini"]))
    paths = ["status", "stream", "stream-shown", "decode"]
    if vendor == "openai":
        paths += ["fault-status", "fault-stream", "fault-stream-shown", "fault-decode"]
    return Case(
        vendor=vendor,
        path=draw(st.sampled_from(paths)),
        key=draw(keys),
        pad=draw(st.integers(0, 2100)),
        label=draw(st.booleans()) and vendor != "ollama",
        status=draw(st.sampled_from([400, 401, 429, 500, 503])),
    )


def provider_for(case: Case, origin: str) -> HTTPProvider:
    common: dict[str, Any] = {"model": "m", "api_key": case.key, "retry": QUICK}
    if case.vendor == "openai":
        return OpenAIChat(base_url=origin + "/v1", **common)
    if case.vendor == "anthropic":
        return AnthropicMessages(base_url=origin, **common)
    if case.vendor == "gemini":
        return GeminiChat(base_url=origin, **common)
    return OllamaChat(base_url=origin, **common)


def server_for(case: Case, message: str, planted: str) -> LoopbackServer:
    label = planted if case.label else "server_error"
    if case.path.startswith("fault-"):
        step: dict[str, Any] = {
            "fault-status": {"kind": "http-error", "status": case.status, "message": message},
            "fault-stream": {"kind": "stream-error", "message": message},
            "fault-stream-shown": {"kind": "stream-error", "message": message, "text": "Once"},
            "fault-decode": {"kind": "bad-json", "record": "{" + message},
        }[case.path]
        return FaultProviderServer([step])
    streamed = "application/x-ndjson" if case.vendor == "ollama" else "text/event-stream"
    if case.path == "status":
        return RecordServer(
            case.status, "application/json", status_body(case.vendor, message, label)
        )
    if case.path == "decode":
        return RecordServer(
            200, streamed, fixture_records(case.vendor, True) + undecodable(case.vendor, message)
        )
    shown = case.path == "stream-shown"
    body = fixture_records(case.vendor, shown) + stream_error(case.vendor, message, label)
    return RecordServer(200, streamed, body)


async def texts_of_a_failed_call(case: Case, planted: str) -> tuple[ProviderError, list[str]]:
    """Run ``case`` with ``planted`` where the upstream echoes text; the error and every text
    the failure produced."""
    # The key straddles every cut: the 200-character record excerpt, the 300-character vendor
    # message, the 2 KiB error body.
    message = "=" * case.pad + f" quota exceeded for key {planted} (retry later)"
    events: list[RetryEvent] = []
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    try:
        async with server_for(case, message, planted) as server:
            provider = provider_for(case, server.origin)
            provider.on_retry = events.append
            try:
                with observe_retries(events.append):
                    await provider.generate([Message.user("hi")])
            except ProviderError as raised:
                error = raised
            else:
                raise AssertionError("the upstream failed, so must the call")
            finally:
                await provider.aclose()
        logging.getLogger("trio_agents.test").error("the call failed", exc_info=error)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    formatter = logging.Formatter("%(name)s %(message)s")
    texts = texts_of(error)
    # A retry event's only text is its code (its delay is a random float that may hold a short
    # key's digits by chance, differently in the control run).
    texts += [event.code for event in events]
    # Ours in full; other libraries' (httpx, httpcore) where a match cannot be a coincidence:
    # a short key such as "0" stands alone in "timeout=10.0" without having leaked.
    texts += [
        formatter.format(record)
        for record in records
        if record.name.startswith("trio_agents") or case.key.startswith("sk-")
    ]
    return error, texts


def occurrences(key: str, texts: list[str]) -> int:
    """How often ``key`` appears in ``texts``: anywhere for a key of 8 characters or more, as a
    whole token for a shorter one (see :func:`appears`)."""
    if len(key) >= ANYWHERE_LENGTH:
        return sum(text.count(key) for text in texts)
    return sum(standalone(key, text) for text in texts)


async def leaked(case: Case) -> list[str]:
    """The texts of a failed call (its error, its logs) the key leaked into: empty when none.
    (A decode failure's error is also checked to say what it is.)"""
    error, texts = await texts_of_a_failed_call(case, case.key)
    if case.path in ("decode", "fault-decode"):
        assert error.code == "json"
        assert "the record:" in error.message
    leaks = [text for text in texts if appears(case.key, text)]
    if leaks and not case.key.startswith("sk-"):
        # A key may be, by coincidence, in what the library writes itself ("400" in
        # "status=400", "," in a repr, "Provider" in "ProviderError"): it has leaked only if it
        # shows more often than when the upstream echoes something else.
        _, control = await texts_of_a_failed_call(case, "KEYSLOT")
        if occurrences(case.key, texts) <= occurrences(case.key, control):
            return []
    return leaks


@settings(max_examples=120, deadline=None)
@given(cases())
# A key the library writes itself (found by a run of the suite: "ProviderError").
@example(Case(vendor="openai", path="status", key="Provider", pad=0, label=False, status=400))
def test_the_key_never_leaves_a_provider_in_an_error(case: Case) -> None:
    assert trio.run(leaked, case) == []


def test_the_reported_case_quota_exceeded_in_the_stream_after_a_200() -> None:
    key = "sk-proj-AbC123xyz_0987654321"
    assert trio.run(leaked, Case("openai", "fault-stream", key, 0, False, 200)) == []
    assert trio.run(leaked, Case("openai", "fault-stream-shown", key, 0, False, 200)) == []


def test_credentials_from_the_auth_hook_and_headers_are_redacted_too() -> None:
    secret, header_secret = "hooked-credential-0123", "xyzzy-header-secret"

    async def main() -> None:
        async def auth() -> dict[str, str]:
            return {"authorization": f"Bearer {secret}"}

        message = f"bad token {secret} / {header_secret}"
        async with FaultProviderServer([{"kind": "stream-error", "message": message}]) as server:
            provider = OpenAIChat(
                model="m",
                base_url=server.base_url,
                auth=auth,
                headers={"X-Goog-Api-Key": header_secret},
                retry=QUICK,
            )
            try:
                await provider.generate([Message.user("hi")])
            except ProviderError as error:
                texts = texts_of(error)
            finally:
                await provider.aclose()
        assert texts
        assert not any(secret in t or header_secret in t for t in texts)
        assert "bad token [redacted] / [redacted]" in str(texts[0])

    trio.run(main)
