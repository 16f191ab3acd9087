"""Tests for protocols.authority: rule matching (tool globs, argument values, predicates), the
first-match-wins order, the fallback, the deny text the model sees, settling an "ask", and
validation of bad values.

No event loop: the module is pure. ``decide`` is checked against a brute-force reference written
independently of the implementation (``fnmatch.fnmatchcase`` per pattern, plain comparisons)."""

from __future__ import annotations

import fnmatch
import math
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.authority import (
    DEFAULT_DENY_REASON,
    DEFAULT_ZONE,
    NO_APPROVER_REASON,
    REJECTED_REASON,
    Authority,
    Decision,
    Rule,
    Verdict,
    resolve_ask,
)
from protocols.errors import ValidationError
from protocols.messages import ToolCall

SETTINGS = settings(max_examples=200, deadline=None)


def call(tool: str, /, **arguments: Any) -> ToolCall:
    return ToolCall(id="c1", name=tool, arguments=arguments)


# ---------------------------------------------------------------------------------------------
# Order and fallback


def test_first_matching_rule_wins_over_later_ones() -> None:
    allow_first = Authority((Rule("allow", ("rm",)), Rule("deny", ("rm",), reason="no")))
    deny_first = Authority((Rule("deny", ("rm",), reason="no"), Rule("allow", ("rm",))))
    assert allow_first.decide(call("rm")).decision == "allow"
    assert allow_first.decide(call("rm")).rule is allow_first.rules[0]
    assert deny_first.decide(call("rm")).decision == "deny"
    assert deny_first.decide(call("rm")).rule is deny_first.rules[0]


def test_a_non_matching_rule_is_skipped_and_the_next_match_decides() -> None:
    authority = Authority(
        (Rule("deny", ("write",), reason="ro"), Rule("ask", ("r*",), zone="fs", name="reads"))
    )
    verdict = authority.decide(call("read"))
    assert (verdict.decision, verdict.zone, verdict.rule) == ("ask", "fs", authority.rules[1])


def test_rules_after_the_first_match_are_never_consulted() -> None:
    seen: list[Mapping[str, Any]] = []

    def spy(arguments: Mapping[str, Any]) -> bool:
        seen.append(arguments)
        return True

    authority = Authority((Rule("allow", ("read",)), Rule("deny", when=spy, reason="x")))
    assert authority.decide(call("read")).decision == "allow"
    assert seen == []
    assert authority.decide(call("write")).decision == "deny"
    assert len(seen) == 1


def test_empty_rules_give_the_default_fallback_allow_in_the_default_zone() -> None:
    verdict = Authority().decide(call("anything"))
    assert verdict == Verdict("allow", None, DEFAULT_ZONE, "")
    assert verdict.allowed


def test_a_deny_fallback_turns_the_gate_into_an_allowlist() -> None:
    authority = Authority((Rule("allow", ("read", "list")),), fallback="deny")
    assert authority.decide(call("read")).decision == "allow"
    denied = authority.decide(call("delete"))
    assert (denied.decision, denied.rule, denied.reason) == ("deny", None, DEFAULT_DENY_REASON)
    assert not denied.allowed


def test_the_fallback_zone_and_reason_are_used_when_no_rule_matches() -> None:
    authority = Authority(
        (Rule("allow", ("read",)),), fallback="ask", fallback_zone="unknown", fallback_reason="new"
    )
    assert authority.decide(call("x")) == Verdict("ask", None, "unknown", "new")
    assert authority.decide(call("read")).zone == DEFAULT_ZONE


def test_add_appends_and_prepend_puts_first_without_changing_the_original() -> None:
    base = Authority((Rule("allow", ("rm",)),))
    deny = Rule("deny", ("rm",), reason="never")
    assert base.add(deny).decide(call("rm")).decision == "allow"
    assert base.prepend(deny).decide(call("rm")).decision == "deny"
    assert base.add(deny).rules == (base.rules[0], deny)
    assert base.rules == (Rule("allow", ("rm",)),)


# ---------------------------------------------------------------------------------------------
# Tool name patterns


@pytest.mark.parametrize(
    ("patterns", "name", "expected"),
    [
        (("*",), "anything", True),
        (("read",), "read", True),
        (("read",), "read_file", False),
        (("read*",), "read_file", True),
        (("read_*",), "read", False),
        (("?m",), "rm", True),
        (("?m",), "rmm", False),
        (("[rw]*",), "write", True),
        (("[!rw]*",), "write", False),
        (("Read",), "read", False),
        (("net_*", "fs_*"), "fs_list", True),
        (("net_*", "fs_*"), "db_query", False),
        (("*_file",), "read_file", True),
    ],
)
def test_tool_patterns_are_case_sensitive_whole_name_globs(
    patterns: tuple[str, ...], name: str, expected: bool
) -> None:
    rule = Rule("deny", patterns, reason="r")
    assert rule.matches(call(name)) is expected
    assert (Authority((rule,)).decide(call(name)).decision == "deny") is expected


def test_a_bare_string_is_one_pattern() -> None:
    rule = Rule("deny", "read_*")
    assert rule.tools == ("read_*",)
    assert rule.matches(call("read_file"))
    assert not rule.matches(call("r"))


# ---------------------------------------------------------------------------------------------
# Argument matching


@pytest.mark.parametrize(
    ("expected", "arguments", "matches"),
    [
        ({"path": "/etc/*"}, {"path": "/etc/passwd"}, True),
        ({"path": "/etc/*"}, {"path": "/tmp/etc/x"}, False),
        ({"path": "/etc/passwd"}, {"path": "/etc/passwd", "mode": "r"}, True),
        ({"path": "*"}, {"other": "x"}, False),
        ({"path": "*"}, {"path": 3}, False),
        ({"n": 1}, {"n": 1}, True),
        ({"n": 1}, {"n": 1.0}, True),
        ({"n": 1}, {"n": 2}, False),
        ({"n": 1}, {"n": True}, False),
        ({"flag": True}, {"flag": 1}, False),
        ({"flag": True}, {"flag": True}, True),
        ({"x": None}, {"x": None}, True),
        ({"x": None}, {}, False),
        ({"x": ["a*"]}, {"x": ["a*"]}, True),
        ({"x": ["a*"]}, {"x": ["ab"]}, False),
        ({"x": {"k": [1, False]}}, {"x": {"k": [1, False]}}, True),
        ({"x": {"k": [1, False]}}, {"x": {"k": [1, 0]}}, False),
        ({"x": {"k": 1}}, {"x": {"k": 1, "j": 2}}, False),
        ({"a": "x", "b": 2}, {"a": "x", "b": 3}, False),
        ({}, {"anything": 1}, True),
    ],
)
def test_argument_values_match_as_str_globs_or_exact_json(
    expected: dict[str, Any], arguments: dict[str, Any], matches: bool
) -> None:
    rule = Rule("deny", arguments=expected, reason="r")
    assert rule.matches(ToolCall(id="c", name="t", arguments=arguments)) is matches


def test_the_rule_keeps_a_read_only_copy_of_its_arguments() -> None:
    source: dict[str, Any] = {"path": "/etc/*"}
    rule = Rule("deny", arguments=source, reason="r")
    source["path"] = "/nothing"
    assert rule.matches(call("t", path="/etc/hosts"))
    assert rule.arguments is not None
    with pytest.raises(TypeError):
        rule.arguments["path"] = "x"  # type: ignore[index]


# ---------------------------------------------------------------------------------------------
# Predicates


def test_the_predicate_sees_the_call_arguments_and_truthiness_decides() -> None:
    rule = Rule("deny", when=lambda a: a.get("size", 0) > 10, reason="too big")
    assert rule.matches(call("upload", size=11))
    assert not rule.matches(call("upload", size=10))
    truthy = Rule("deny", when=lambda a: a.get("name", ""), reason="r")
    assert truthy.matches(call("t", name="x"))
    assert not truthy.matches(call("t", name=""))


def test_the_predicate_runs_only_when_name_and_arguments_matched() -> None:
    calls: list[str] = []

    def predicate(arguments: Mapping[str, Any]) -> bool:
        calls.append(arguments["path"])
        return True

    rule = Rule("deny", ("write",), when=predicate, arguments={"path": "/etc/*"}, reason="r")
    assert not rule.matches(call("read", path="/etc/a"))
    assert not rule.matches(call("write", path="/tmp/a"))
    assert rule.matches(call("write", path="/etc/a"))
    assert calls == ["/etc/a"]


def test_an_unevaluable_deny_asks_and_never_falls_through() -> None:
    # 003 G15: a deny (or ask) whose predicate raises becomes an ask -- never a fall-through to
    # a later allow or the fallback. The problem is recorded.
    authority = Authority(
        (
            Rule("deny", when=lambda a: a["missing"], reason="boom", name="bad"),
            Rule("allow", ("rm",), zone="fs"),
        )
    )
    verdict = authority.decide(call("rm"))
    assert (verdict.decision, verdict.rule, verdict.reason) == ("ask", authority.rules[0], "boom")
    assert len(verdict.problems) == 1
    assert verdict.problems[0].startswith("rule #0 'bad': predicate raised KeyError")
    assert not authority.rules[0].matches(call("rm"))
    unnamed = Authority((Rule("ask", when=lambda a: 1 / 0 > 0),)).decide(call("t"))
    assert unnamed.decision == "ask"
    assert unnamed.reason == "rule ask ['*'] could not be evaluated"


def test_a_raising_predicate_falls_through_to_the_fallback() -> None:
    authority = Authority((Rule("allow", when=lambda a: a["x"]),), fallback="deny")
    verdict = authority.decide(call("t"))
    assert (verdict.decision, verdict.rule, verdict.reason) == ("deny", None, DEFAULT_DENY_REASON)
    assert verdict.problems == ("rule #0 allow ['*']: predicate raised KeyError: 'x'",)


def test_a_long_exception_message_is_truncated_in_the_problem() -> None:
    def raises(arguments: Mapping[str, Any]) -> bool:
        raise ValueError("x" * 5000)

    verdict = Authority((Rule("allow", when=raises),), fallback="deny").decide(call("t"))
    assert verdict.decision == "deny"
    assert len(verdict.problems) == 1
    assert verdict.problems[0].endswith("x" * 200 + "...")
    assert len(verdict.problems[0]) < 300


def test_the_predicate_cannot_mutate_the_call_arguments() -> None:
    def mutate(arguments: Mapping[str, Any]) -> bool:
        arguments["path"] = "/elsewhere"  # type: ignore[index]
        return True

    tool_call = call("t", path="/etc/passwd")
    verdict = Authority((Rule("deny", when=mutate),)).decide(tool_call)
    assert verdict.decision == "ask"  # the deny could not be evaluated
    assert "TypeError" in verdict.problems[0]
    assert tool_call.arguments == {"path": "/etc/passwd"}


class _Stop(BaseException):
    pass


def test_a_base_exception_from_a_predicate_propagates() -> None:
    def stop(arguments: Mapping[str, Any]) -> bool:
        raise _Stop

    with pytest.raises(_Stop):
        Authority((Rule("deny", when=stop),)).decide(call("t"))


# ---------------------------------------------------------------------------------------------
# Verdicts and the deny text


def test_deny_text_is_exactly_denied_colon_reason() -> None:
    authority = Authority((Rule("deny", ("rm",), reason="no deletions", zone="fs", name="rm"),))
    verdict = authority.decide(call("rm"))
    assert verdict.model_text() == "denied: no deletions"
    assert (verdict.zone, verdict.reason) == ("fs", "no deletions")


def test_a_deny_without_a_reason_gets_the_default_reason() -> None:
    by_rule = Authority((Rule("deny"),)).decide(call("t"))
    by_fallback = Authority(fallback="deny").decide(call("t"))
    assert by_rule.model_text() == f"denied: {DEFAULT_DENY_REASON}"
    assert by_fallback.model_text() == "denied: not allowed by authority"


@pytest.mark.parametrize("decision", ["allow", "ask"])
def test_model_text_refuses_anything_but_a_deny(decision: Decision) -> None:
    verdict = Authority((Rule(decision, reason="why"),)).decide(call("t"))
    assert verdict.decision == decision
    with pytest.raises(ValidationError, match="only defined for a deny"):
        verdict.model_text()


def test_a_verdict_for_an_allow_or_ask_keeps_the_rule_reason() -> None:
    verdict = Authority((Rule("ask", reason="writes to disk", zone="fs"),)).decide(call("t"))
    assert (verdict.reason, verdict.zone, verdict.allowed) == ("writes to disk", "fs", False)


# ---------------------------------------------------------------------------------------------
# Settling an "ask"


def asked() -> Verdict:
    authority = Authority((Rule("ask", ("rm",), zone="fs", reason="deletes", name="rm"),))
    return authority.decide(call("rm"))


def test_an_approved_ask_becomes_an_allow_keeping_rule_and_zone() -> None:
    verdict = asked()
    approved = resolve_ask(verdict, True, None)
    assert approved == attrs.evolve(verdict, decision="allow")
    assert approved.allowed
    assert resolve_ask(verdict, True, "ok by alice").reason == "ok by alice"


def test_a_rejected_ask_becomes_a_deny_with_the_approvers_reason() -> None:
    rejected = resolve_ask(asked(), False, "not today")
    assert (rejected.decision, rejected.zone, rejected.rule) == ("deny", "fs", asked().rule)
    assert rejected.model_text() == "denied: not today"
    assert resolve_ask(asked(), False, None).model_text() == f"denied: {REJECTED_REASON}"
    assert resolve_ask(asked(), False, "").reason == REJECTED_REASON


def test_an_ask_without_an_approver_is_denied_with_a_clear_reason() -> None:
    verdict = resolve_ask(asked(), None, None)
    assert verdict.decision == "deny"
    assert verdict.model_text() == f"denied: {NO_APPROVER_REASON}"
    assert "no approver attached" in verdict.reason


@pytest.mark.parametrize("decision", ["allow", "deny"])
def test_resolve_ask_refuses_a_verdict_that_is_not_an_ask(decision: Decision) -> None:
    verdict = Verdict(decision, None, "default", "r")
    with pytest.raises(ValidationError, match="needs an 'ask' Verdict"):
        resolve_ask(verdict, True, None)


def test_resolve_ask_refuses_a_non_bool_answer() -> None:
    with pytest.raises(ValidationError, match="approved must be a bool or None"):
        resolve_ask(asked(), 1, None)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="reason must be a str or None"):
        resolve_ask(asked(), False, 3)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Validation


# Untyped aliases: these calls pass wrong types on purpose.
AnyRule: Any = Rule
AnyAuthority: Any = Authority
AnyVerdict: Any = Verdict


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: AnyRule("maybe"), r"Rule\.decision must be one of 'allow', 'deny', 'ask'"),
        (lambda: AnyRule(None), r"Rule\.decision must be one of"),
        (lambda: AnyRule("deny", ()), r"Rule\.tools must hold at least one pattern"),
        (lambda: AnyRule("deny", ("",)), r"Rule\.tools\[0\] must be a non-empty str"),
        (lambda: AnyRule("deny", ("ok", 3)), r"Rule\.tools\[1\] must be a non-empty str"),
        (lambda: AnyRule("deny", ("read file",)), r"Rule\.tools\[0\] must not contain whitespace"),
        (lambda: AnyRule("deny", 5), r"Rule\.tools must be a str or a sequence"),
        (lambda: AnyRule("deny", when="yes"), r"Rule\.when must be callable or None"),
        (lambda: AnyRule("deny", arguments=["path"]), r"Rule\.arguments must be a mapping"),
        (lambda: AnyRule("deny", arguments={1: "x"}), r"Rule\.arguments keys must be non-empty"),
        (lambda: AnyRule("deny", arguments={"": "x"}), r"Rule\.arguments keys must be non-empty"),
        (lambda: AnyRule("deny", arguments={"n": math.nan}), r"Rule\.arguments"),
        (lambda: AnyRule("deny", zone=""), r"Rule\.zone must be a non-empty str"),
        (lambda: AnyRule("deny", reason=None), r"Rule\.reason must be a str"),
        (lambda: AnyRule("deny", name=1), r"Rule\.name must be a str"),
        (lambda: AnyAuthority(fallback="block"), r"Authority\.fallback must be one of"),
        (lambda: AnyAuthority(("allow",)), r"Authority\.rules\[0\] must be a Rule"),
        (lambda: AnyAuthority(AnyRule("allow")), r"Authority\.rules must be a sequence of Rule"),
        (lambda: AnyAuthority(fallback_zone=""), r"Authority\.fallback_zone must be a non-empty"),
        (
            lambda: AnyVerdict("deny", None, "z", ""),
            r"Verdict\.reason must be non-empty for a deny",
        ),
        (lambda: AnyVerdict("nope", None, "z", "r"), r"Verdict\.decision must be one of"),
        (lambda: AnyVerdict("allow", "rule", "z", ""), r"Verdict\.rule must be a Rule or None"),
        (
            lambda: AnyVerdict("allow", None, "z", "", ("ok", 2)),
            r"Verdict\.problems\[1\]",
        ),
    ],
)
def test_bad_values_are_refused_naming_the_field(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        build()


def test_rules_are_hashable_values_compared_by_content() -> None:
    one = Rule("deny", ("rm",), arguments={"path": "/etc/*"}, reason="r")
    two = Rule("deny", ["rm"], arguments={"path": "/etc/*"}, reason="r")
    assert one == two
    assert hash(one) == hash(two)
    assert one != attrs.evolve(one, arguments={"path": "/tmp/*"})
    assert len({one, two, Rule("allow")}) == 2


# ---------------------------------------------------------------------------------------------
# Property: decide() is deterministic and equals a brute-force reference


def _raises(arguments: Mapping[str, Any]) -> bool:
    return bool(arguments["no such key"])


PREDICATES: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "true": lambda a: True,
    "false": lambda a: False,
    "n_is_1": lambda a: a.get("n") == 1,
    "has_path": lambda a: "path" in a,
    "raises": _raises,
}
NAMES = ["read", "read_file", "write", "rm", "net_get", "Read"]
PATTERNS = ["*", "read", "read*", "?m", "[rw]*", "[!r]*", "net_*", "*_file", "write", "x"]
VALUES: list[Any] = ["/etc/passwd", "/tmp/x", "", "x", 1, 2, 1.0, True, False, None, [1], {"a": 1}]
EXPECTED: list[Any] = ["/etc/*", "/tmp/x", "*", "", 1, True, None, [1], {"a": 1}]
DECISIONS: list[Decision] = ["allow", "deny", "ask"]

rules_strategy = st.builds(
    Rule,
    st.sampled_from(DECISIONS),
    st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=3).map(tuple),
    st.none() | st.sampled_from(sorted(PREDICATES)).map(PREDICATES.__getitem__),
    st.none() | st.dictionaries(st.sampled_from(["path", "n"]), st.sampled_from(EXPECTED)),
    st.sampled_from(["default", "fs", "net"]),
    st.sampled_from(["", "because"]),
    st.sampled_from(["", "named"]),
)
calls_strategy = st.builds(
    lambda name, arguments: ToolCall(id="c", name=name, arguments=arguments),
    st.sampled_from(NAMES),
    st.fixed_dictionaries(
        {},
        optional={key: st.sampled_from(VALUES) for key in ("path", "n", "other")},
    ),
)


def reference_equal(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, str) or isinstance(actual, str):
        return False  # a str expectation is a glob, handled by the caller
    return bool(expected == actual)


def reference_match(rule: Rule, tool_call: ToolCall) -> bool | None:
    """True/False, or None for "the predicate raised"."""
    if not any(fnmatch.fnmatchcase(tool_call.name, pattern) for pattern in rule.tools):
        return False
    for key, expected in (rule.arguments or {}).items():
        if key not in tool_call.arguments:
            return False
        actual = tool_call.arguments[key]
        if isinstance(expected, str):
            if not (isinstance(actual, str) and fnmatch.fnmatchcase(actual, expected)):
                return False
        elif not reference_equal(expected, actual):
            return False
    if rule.when is None:
        return True
    try:
        return bool(rule.when(tool_call.arguments))
    except KeyError:
        return None


def reference_decide(authority: Authority, tool_call: ToolCall) -> tuple[str, int | None, int]:
    raised = 0
    for index, rule in enumerate(authority.rules):
        outcome = reference_match(rule, tool_call)
        if outcome is True:
            return rule.decision, index, raised
        if outcome is None:
            raised += 1
            if rule.decision != "allow":  # an unevaluable deny or ask asks, never falls through
                return "ask", index, raised
    return authority.fallback, None, raised


@SETTINGS
@given(
    rules=st.lists(rules_strategy, max_size=6),
    fallback=st.sampled_from(DECISIONS),
    tool_call=calls_strategy,
)
def test_decide_is_deterministic_and_matches_the_reference(
    rules: list[Rule], fallback: Decision, tool_call: ToolCall
) -> None:
    authority = Authority(rules, fallback=fallback)
    verdict = authority.decide(tool_call)
    assert authority.decide(tool_call) == verdict
    decision, index, raised = reference_decide(authority, tool_call)
    assert verdict.decision == decision
    assert len(verdict.problems) == raised
    if index is None:
        assert verdict.rule is None
        assert verdict.zone == DEFAULT_ZONE
    else:
        assert verdict.rule is authority.rules[index]
        assert verdict.zone == authority.rules[index].zone
        assert all(not rule.matches(tool_call) for rule in authority.rules[:index])
    if decision == "deny":
        assert verdict.reason
        assert verdict.model_text() == f"denied: {verdict.reason}"
    for rule in authority.rules:  # every rule on its own, not only the deciding one
        assert rule.matches(tool_call) is (reference_match(rule, tool_call) is True)


def test_withholds_only_tools_every_call_of_which_is_denied() -> None:
    authority = Authority(
        (
            Rule("deny", tools=("rm",)),
            Rule("deny", tools=("cp",), arguments={"path": "/etc/*"}),
            Rule("ask", tools=("mv",), when=lambda a: True),
        ),
        fallback="allow",
    )
    assert authority.withholds("rm")
    assert not authority.withholds("cp")  # only some of its calls are denied
    assert not authority.withholds("mv")
    assert not authority.withholds("ls")
    assert Authority(fallback="deny").withholds("ls")
