"""protocols.errors.redact / excerpt / scrub: secrets leave error text, and the text stays readable.

The rule (see ``redact``'s docstring): a secret of 8 characters or more goes wherever it appears
(and its cut-off start at a cut); a shorter one only where it stands as a whole token.
"""

from __future__ import annotations

import json
import urllib.parse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.errors import (
    ANYWHERE_LENGTH,
    REDACTED,
    ProtocolError,
    ProviderError,
    excerpt,
    redact,
    scrub,
)

LONG = "sk-proj-4f9Qx_7Zt-Lm2Pq8Rw"


def standalone(text: str, secret: str) -> bool:
    """Whether ``secret`` stands in ``text`` as a whole token (written independently of the
    implementation: a plain scan, no regular expression)."""
    near = set(secret)
    start = text.find(secret)
    while start >= 0:
        end = start + len(secret)
        before = text[start - 1] if start else ""
        after = text[end] if end < len(text) else ""
        if all(not (c.isalnum() or c == "_" or c in near) for c in (before, after) if c):
            return True
        start = text.find(secret, start + 1)
    return False


# --------------------------------------------------------------------------- examples


def test_a_short_key_leaves_words_readable() -> None:
    assert redact("expected a value, got x", ["x"]) == f"expected a value, got {REDACTED}"
    assert redact("e[x]pected x.", ["x"]) == f"e[{REDACTED}]pected {REDACTED}."
    # the old substring rule turned this into "e[redacted]pected"
    assert redact("expected", ["x"]) == "expected"


def test_a_key_that_is_an_ordinary_word_goes_where_the_word_stands_alone() -> None:
    assert redact("the key none is invalid; nonetheless", ["none"]) == (
        f"the key {REDACTED} is invalid; nonetheless"
    )


@pytest.mark.parametrize(
    "key", ["sk-abc_123", "a.b*c", "(x)+?", "[z]", "^$|", "a\\b", 'q"t', "k{2}"]
)
def test_keys_with_token_and_regex_characters(key: str) -> None:
    text = f"{key} quota exceeded for key {key}: {key}"
    redacted = redact(text, [key])
    assert not standalone(redacted, key)
    assert "quota exceeded for key" in redacted
    # a longer token that merely contains a short key is another word
    if len(key) < ANYWHERE_LENGTH and key[-1].isalnum():
        assert redact(f"{key}9", [key]) == f"{key}9"


def test_a_long_key_goes_wherever_it_appears_even_inside_a_word() -> None:
    assert redact(f"key={LONG}; prefix{LONG}suffix", [LONG]) == (
        f"key={REDACTED}; prefix{REDACTED}suffix"
    )


@pytest.mark.parametrize("key", ["x", "abc", LONG])
def test_keys_at_the_edges_of_the_text(key: str) -> None:
    assert redact(key, [key]) == REDACTED
    assert redact(f"{key} end", [key]) == f"{REDACTED} end"
    assert redact(f"start {key}", [key]) == f"start {REDACTED}"
    assert redact(f"{key}{key}", [key]) in (REDACTED * 2, f"{key}{key}")  # one token, twice


def test_the_cut_off_start_of_a_long_key_is_removed_at_a_cut() -> None:
    assert redact(f"bad key {LONG[:12]}", [LONG]) == f"bad key {REDACTED}"
    assert redact(f"bad key {LONG[:12]}... more", [LONG]) == f"bad key {REDACTED}... more"
    assert redact(f"bad key {LONG[:12]}\u2026", [LONG]) == f"bad key {REDACTED}\u2026"
    # a short prefix is left (it could be any word), and so is a prefix that is not at a cut
    assert redact(f"bad key {LONG[:5]}", [LONG]) == f"bad key {LONG[:5]}"
    assert redact(f"bad key {LONG[:12]} more", [LONG]) == f"bad key {LONG[:12]} more"


def test_escaped_forms_are_removed_too() -> None:
    key = 'sk-"quoted"/\\path'
    body = json.dumps({"error": {"message": f"bad key {key}"}})
    assert json.dumps(key)[1:-1] in body
    assert json.dumps(key)[1:-1] not in redact(body, [key])
    url = f"https://x.test/?key={urllib.parse.quote(key, safe='')}"
    assert urllib.parse.quote(key, safe="") not in redact(url, [key])


def test_empty_blank_and_missing_secrets_change_nothing() -> None:
    text = "a b  c"
    assert redact(text, [None, "", " ", "  "]) == text
    assert redact("", [LONG]) == ""


def test_the_marker_itself_is_never_redacted_again() -> None:
    once = redact("key redacted and [redacted]", ["redacted"])
    assert once == f"key {REDACTED} and {REDACTED}"
    assert redact(once, ["redacted"]) == once


# --------------------------------------------------------------------------- properties

alphabet = st.characters(codec="utf-8", exclude_categories=("Cs",))
keys = st.one_of(
    st.text(alphabet, min_size=1, max_size=12),
    st.builds(lambda tail: "sk-" + tail, st.text("abcXYZ019_-", min_size=5, max_size=60)),
    st.sampled_from(["x", "none", "ollama", "a.b*c", "sk-abc_123", "(?:", "\\", "EMPTY"]),
).filter(lambda key: key.strip() != "")


@given(keys, st.lists(st.text(alphabet, max_size=12), min_size=1, max_size=5))
def test_the_key_never_survives(key: str, fillers: list[str]) -> None:
    for separator in (" ", ": ", "=", "\n", '"'):
        text = separator.join(f"{filler}{separator}{key}" for filler in fillers)
        redacted = redact(text, [key])
        if len(key) >= ANYWHERE_LENGTH:
            assert key not in redacted
        else:
            assert not standalone(redacted, key)
        assert redact(redacted, [key]) == redacted  # idempotent


@given(keys, st.text(alphabet, max_size=60))
def test_text_without_the_key_is_unchanged(key: str, text: str) -> None:
    probe = key[:ANYWHERE_LENGTH]
    if probe in text or REDACTED in text:
        return
    assert redact(text, [key]) == text


@given(st.text(alphabet, max_size=400), st.integers(1, 250))
def test_excerpt_is_short_one_line_and_marks_its_cut(text: str, limit: int) -> None:
    shown = excerpt(text, limit)
    assert len(shown) <= limit
    assert shown.isprintable()
    if len(text) > limit:
        assert shown.endswith("\u2026")
    else:
        assert len(shown) == len(text)


@given(st.text("abcdefgh-_0123456789", min_size=8, max_size=40), st.integers(0, 300))
def test_a_key_cut_by_an_excerpt_leaves_no_long_piece(key: str, pad: int) -> None:
    shown = redact(excerpt("=" * pad + key + "=" * 50, 200), [key])
    for start in range(len(key) - ANYWHERE_LENGTH + 1):
        assert key[start : start + ANYWHERE_LENGTH] not in shown


# --------------------------------------------------------------------------- scrub


def test_scrub_reaches_every_text_of_an_error_and_its_chain() -> None:
    cause = ProtocolError(f"invalid JSON near {LONG}", code="json")
    error = ProviderError(
        f"bad key {LONG}",
        vendor_type=f"type {LONG}",
        vendor_code=LONG,
        excerpt=f'{{"error": "{LONG}"}}',
    )
    error.__cause__ = cause
    context = ValueError("plain", LONG, 3)
    cause.__context__ = context
    scrub(error, [LONG])
    texts = [
        str(error),
        repr(error),
        *map(str, error.args),
        error.message,
        error.excerpt,
        str(error.vendor_type),
        str(error.vendor_code),
        str(cause),
        repr(cause),
        cause.message,
        repr(context),
    ]
    assert all(LONG not in text for text in texts)
    assert context.args[2] == 3  # what is not text is kept
    scrub(error, [LONG])  # again: nothing changes
    assert error.message == f"bad key {REDACTED}"


def test_scrub_cuts_a_huge_text_an_exception_keeps() -> None:
    document = "{" + "x" * 70_000 + LONG
    try:
        json.loads(document)
    except ValueError as caught:
        error = caught
    scrub(error, [LONG])
    kept = vars(error)["doc"]
    assert LONG not in kept
    assert len(kept) <= 64 * 1024 + 1
    assert kept.endswith("\u2026")
