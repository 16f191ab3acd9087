"""The authority gate: ordered rules that decide whether a tool call may run.

An :class:`Authority` holds an ordered tuple of :class:`Rule` values and a fallback decision.
:meth:`Authority.decide` turns one :class:`~protocols.messages.ToolCall` into a
:class:`Verdict`: ``"allow"`` (run it), ``"deny"`` (never run it; the model sees
:meth:`Verdict.model_text`, exactly ``"denied: <reason>"``) or ``"ask"`` (a human decides; the
caller awaits its approver and settles the verdict with :func:`resolve_ask`). Everything here is
pure and synchronous: no event loop, no I/O, no hidden state.

Rules:

* **First match wins.** Rules are tried in order; the first one that matches decides, and no
  later rule is consulted (nor its predicate called). When none matches, the fallback decides
  (``"allow"`` by default, a denylist; ``fallback="deny"`` makes an allowlist). An empty rule
  list always gives the fallback.
* **A rule matches** when all of its conditions hold, checked cheapest first:

  1. ``tools``: the call's name matches at least one pattern. Patterns are shell-style globs
     (``*``, ``?``, ``[seq]``, ``[!seq]``), matched case-sensitively against the whole name; a
     pattern without those characters is an exact name. The default ``("*",)`` matches any tool.
  2. ``arguments``: every key is present among the call's *top-level* arguments and its value
     matches. A ``str`` expected value is a glob that matches only a ``str`` argument; any other
     expected value must equal the argument as JSON (``True`` never equals ``1``, nested values
     compare exactly, a nested string is never a glob). Keys the rule does not name are ignored.
  3. ``when``: the predicate, called with a read-only view of the call's top-level arguments,
     returns something truthy.

* **A predicate that raises** (any ``Exception``; a ``BaseException`` such as a cancellation
  propagates) counts as *not matching*: evaluation moves on to the next rule, and the problem is
  recorded on the verdict in :attr:`Verdict.problems` (rule position, name and exception type)
  so the caller can report it. ``decide`` itself never raises because of a predicate.
* **A deny always has a reason**: the rule's ``reason``, else :data:`DEFAULT_DENY_REASON`.
* Every value is frozen and validated at construction: a bad rule raises
  :class:`~protocols.errors.ValidationError` naming the field.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, Literal, TypeAlias, get_args

import attrs

from ._json import check_json
from .errors import ValidationError
from .messages import ToolCall

__all__ = [
    "DEFAULT_DENY_REASON",
    "DEFAULT_ZONE",
    "NO_APPROVER_REASON",
    "REJECTED_REASON",
    "Authority",
    "Decision",
    "Rule",
    "Verdict",
    "resolve_ask",
]

#: What a rule (or the fallback) decides for a call.
Decision: TypeAlias = Literal["allow", "deny", "ask"]

_DECISIONS: Final[tuple[str, ...]] = get_args(Decision)

#: The zone of a rule or fallback that names none.
DEFAULT_ZONE: Final = "default"

#: The reason of a deny whose rule (or fallback) gives none.
DEFAULT_DENY_REASON: Final = "not allowed by authority"

#: The reason of an "ask" settled with no approver attached.
NO_APPROVER_REASON: Final = "approval required but no approver attached"

#: The reason of an "ask" the approver rejected without saying why.
REJECTED_REASON: Final = "rejected by approver"

#: The longest exception message kept in a recorded problem (characters).
_PROBLEM_EXCERPT: Final = 200

_WHITESPACE = re.compile(r"\s")


# ---------------------------------------------------------------------------------------------
# Validation helpers (each raises ValidationError naming "Class.field").


def _fail(instance: object, field: str, rule: str) -> ValidationError:
    return ValidationError(f"{type(instance).__name__}.{field} {rule}")


def _decision(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or value not in _DECISIONS:
        allowed = ", ".join(repr(decision) for decision in _DECISIONS)
        raise _fail(instance, attribute.name, f"must be one of {allowed}, not {value!r}")


def _nonempty_str(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise _fail(instance, attribute.name, "must be a non-empty str")


def _str(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise _fail(instance, attribute.name, f"must be a str, not {type(value).__name__}")


def _optional_callable(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not callable(value):
        raise _fail(instance, attribute.name, f"must be callable or None, not {value!r}")


def _optional_rule(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Rule):
        raise _fail(instance, attribute.name, f"must be a Rule or None, not {value!r}")


def _to_patterns(value: str | Iterable[str]) -> tuple[str, ...]:
    """A bare str is one pattern; any other iterable of non-empty, blank-free str is kept."""
    if isinstance(value, str):
        value = (value,)
    if isinstance(value, bytes | Mapping) or not isinstance(value, Iterable):
        raise ValidationError("Rule.tools must be a str or a sequence of str")
    patterns = tuple(value)
    if not patterns:
        raise ValidationError("Rule.tools must hold at least one pattern")
    for index, pattern in enumerate(patterns):
        if not isinstance(pattern, str) or not pattern:
            raise ValidationError(f"Rule.tools[{index}] must be a non-empty str, not {pattern!r}")
        if _WHITESPACE.search(pattern):
            raise ValidationError(f"Rule.tools[{index}] must not contain whitespace: {pattern!r}")
    return patterns


def _to_expected(value: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A read-only copy of the expected top-level argument values (strict JSON)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValidationError(f"Rule.arguments must be a mapping or None, not {value!r}")
    for key in value:
        if not isinstance(key, str) or not key:
            raise ValidationError(f"Rule.arguments keys must be non-empty str, not {key!r}")
    checked = check_json(dict(value), what="Rule.arguments")
    return MappingProxyType(dict(checked))


def _to_problems(value: Iterable[str]) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValidationError("Verdict.problems must be a sequence of str")
    problems = tuple(value)
    for index, problem in enumerate(problems):
        if not isinstance(problem, str):
            raise ValidationError(f"Verdict.problems[{index}] must be a str, not {problem!r}")
    return problems


def _to_rules(value: Iterable[Rule]) -> tuple[Rule, ...]:
    if isinstance(value, Rule) or not isinstance(value, Iterable):
        raise ValidationError("Authority.rules must be a sequence of Rule")
    rules = tuple(value)
    for index, rule in enumerate(rules):
        if not isinstance(rule, Rule):
            raise ValidationError(f"Authority.rules[{index}] must be a Rule, not {rule!r}")
    return rules


# ---------------------------------------------------------------------------------------------
# Matching helpers.


def _glob(patterns: Iterable[str]) -> re.Pattern[str]:
    """One compiled regex matching a whole string against any of ``patterns`` (fnmatch rules,
    case-sensitive on every platform)."""
    return re.compile("|".join(f"(?:{fnmatch.translate(pattern)})" for pattern in patterns))


def _json_equal(expected: Any, actual: Any) -> bool:
    """Equality of two strict-JSON values, with booleans distinct from numbers."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and expected.keys() == actual.keys()
            and all(_json_equal(item, actual[key]) for key, item in expected.items())
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(expected) == len(actual)
            and all(_json_equal(a, b) for a, b in zip(expected, actual, strict=True))
        )
    if isinstance(expected, int | float):
        return isinstance(actual, int | float) and expected == actual
    return type(expected) is type(actual) and expected == actual


def _describe(error: Exception) -> str:
    message = str(error)
    if len(message) > _PROBLEM_EXCERPT:
        message = message[:_PROBLEM_EXCERPT] + "..."
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


# ---------------------------------------------------------------------------------------------
# Values.


@attrs.frozen
class Rule:
    """One authority rule: when a call matches, ``decision`` applies (see the module docstring
    for exactly when a rule matches).

    ``zone`` labels the rule for auditing and UIs (``"filesystem"``, ``"network"``); ``reason``
    is what a deny shows the model (``"denied: <reason>"``) and what an ask shows the approver;
    ``name`` identifies the rule in audit records and recorded problems.
    """

    decision: Decision = attrs.field(validator=_decision)
    tools: tuple[str, ...] = attrs.field(default=("*",), converter=_to_patterns)
    when: Callable[[Mapping[str, Any]], object] | None = attrs.field(
        default=None, validator=_optional_callable
    )
    arguments: Mapping[str, Any] | None = attrs.field(
        default=None, converter=_to_expected, hash=False
    )
    zone: str = attrs.field(default=DEFAULT_ZONE, validator=_nonempty_str)
    reason: str = attrs.field(default="", validator=_str)
    name: str = attrs.field(default="", validator=_str)
    # Compiled once: the tool patterns as one regex, and each str expected value as a glob.
    _names: re.Pattern[str] = attrs.field(init=False, eq=False, repr=False, hash=False)
    _globs: Mapping[str, re.Pattern[str]] = attrs.field(
        init=False, eq=False, repr=False, hash=False
    )

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_names", _glob(self.tools))
        globs = {
            key: _glob((value,))
            for key, value in (self.arguments or {}).items()
            if isinstance(value, str)
        }
        object.__setattr__(self, "_globs", globs)

    def label(self) -> str:
        """A short human label: the rule's name, else its decision and tool patterns."""
        return repr(self.name) if self.name else f"{self.decision} {list(self.tools)}"

    def matches(self, call: ToolCall) -> bool:
        """Whether this rule applies to ``call``. A raising predicate gives ``False``."""
        return self._check(call) is True

    def _check(self, call: ToolCall) -> bool | Exception:
        """``True``/``False``, or the exception the predicate raised (which means no match)."""
        if self._names.match(call.name) is None:
            return False
        arguments = call.arguments
        if self.arguments is not None:
            for key, expected in self.arguments.items():
                if key not in arguments:
                    return False
                actual = arguments[key]
                if isinstance(expected, str):
                    if not isinstance(actual, str) or self._globs[key].match(actual) is None:
                        return False
                elif not _json_equal(expected, actual):
                    return False
        if self.when is None:
            return True
        try:
            return bool(self.when(MappingProxyType(arguments)))
        except Exception as error:  # a predicate's bug means "no match", never a crash
            return error


@attrs.frozen
class Verdict:
    """What the authority decided for one call.

    Guarantees: ``rule`` is the rule that matched, ``None`` when the fallback applied; ``zone``
    is that rule's (or the fallback's) zone; a ``"deny"`` always has a non-empty ``reason``;
    ``problems`` lists, in rule order, the predicates that raised while this call was checked
    (each counted as not matching), empty when none did.
    """

    decision: Decision = attrs.field(validator=_decision)
    rule: Rule | None = attrs.field(validator=_optional_rule)
    zone: str = attrs.field(validator=_nonempty_str)
    reason: str = attrs.field(validator=_str)
    problems: tuple[str, ...] = attrs.field(default=(), converter=_to_problems)

    def __attrs_post_init__(self) -> None:
        if self.decision == "deny" and not self.reason:
            raise ValidationError("Verdict.reason must be non-empty for a deny")

    @property
    def allowed(self) -> bool:
        """Whether the call may run now (only ``"allow"``; an ``"ask"`` is not yet allowed)."""
        return self.decision == "allow"

    def model_text(self) -> str:
        """The tool result the model sees for a denied call: exactly ``"denied: <reason>"``.

        Raises :class:`~protocols.errors.ValidationError` for any other decision: an allowed
        call's result comes from the tool, and an ``"ask"`` must be settled first
        (:func:`resolve_ask`).
        """
        if self.decision != "deny":
            raise ValidationError(
                f"Verdict.model_text is only defined for a deny, not {self.decision!r}"
            )
        return f"denied: {self.reason}"


def _verdict(
    decision: Decision, rule: Rule | None, zone: str, reason: str, problems: tuple[str, ...]
) -> Verdict:
    if decision == "deny" and not reason:
        reason = DEFAULT_DENY_REASON
    return Verdict(decision, rule, zone, reason, problems)


@attrs.frozen
class Authority:
    """An ordered set of rules and a fallback; :meth:`decide` gates one tool call.

    Immutable: :meth:`add` and :meth:`prepend` return a new authority. ``fallback_zone`` and
    ``fallback_reason`` describe the verdict when no rule matches.
    """

    rules: tuple[Rule, ...] = attrs.field(default=(), converter=_to_rules)
    fallback: Decision = attrs.field(default="allow", validator=_decision)
    fallback_zone: str = attrs.field(default=DEFAULT_ZONE, validator=_nonempty_str)
    fallback_reason: str = attrs.field(default="", validator=_str)

    def decide(self, call: ToolCall) -> Verdict:
        """The verdict for ``call``: the first matching rule's decision, else the fallback's.

        Pure and deterministic for deterministic predicates; never raises because a predicate
        did (see the module docstring). Rules after the first match are never consulted.
        """
        problems: list[str] = []
        for index, rule in enumerate(self.rules):
            outcome = rule._check(call)
            if outcome is True:
                return _verdict(rule.decision, rule, rule.zone, rule.reason, tuple(problems))
            if isinstance(outcome, Exception):
                problems.append(
                    f"rule #{index} {rule.label()}: predicate raised {_describe(outcome)}"
                )
                if rule.decision != "allow":
                    # A deny or ask that cannot be evaluated must not fall through to a later
                    # allow: a human decides (and with no approver attached, that is a deny).
                    reason = rule.reason or f"rule {rule.label()} could not be evaluated"
                    return _verdict("ask", rule, rule.zone, reason, tuple(problems))
        return _verdict(
            self.fallback, None, self.fallback_zone, self.fallback_reason, tuple(problems)
        )

    def withholds(self, name: str) -> bool:
        """Whether every call to the tool ``name`` is denied, whatever its arguments -- a tool
        the model need not be shown at all."""
        for rule in self.rules:
            if rule._names.match(name) is None:
                continue
            if rule.arguments is None and rule.when is None:
                return rule.decision == "deny"
            if rule.decision != "deny":
                return False  # a conditional allow or ask may let some call through
        return self.fallback == "deny"

    def add(self, *rules: Rule) -> Authority:
        """A new authority with ``rules`` appended (consulted after the existing ones)."""
        return attrs.evolve(self, rules=(*self.rules, *rules))

    def prepend(self, *rules: Rule) -> Authority:
        """A new authority with ``rules`` first (consulted before the existing ones)."""
        return attrs.evolve(self, rules=(*rules, *self.rules))


def resolve_ask(verdict: Verdict, approved: bool | None, reason: str | None = None) -> Verdict:
    """Settle an ``"ask"`` verdict once the approver answered.

    ``approved=True`` gives ``"allow"``; ``False`` gives ``"deny"`` with ``reason`` (else
    :data:`REJECTED_REASON`); ``None`` means no approver is attached and gives ``"deny"`` with
    ``reason`` (else :data:`NO_APPROVER_REASON`). An allow keeps ``reason`` when given, else the
    ask's own reason. The rule, zone and problems are kept. Raises
    :class:`~protocols.errors.ValidationError` when ``verdict`` is not an ``"ask"`` or
    ``approved`` is not a bool or ``None``.
    """
    if not isinstance(verdict, Verdict) or verdict.decision != "ask":
        raise ValidationError(f"resolve_ask needs an 'ask' Verdict, not {verdict!r}")
    if approved is not None and not isinstance(approved, bool):
        raise ValidationError(f"resolve_ask approved must be a bool or None, not {approved!r}")
    if reason is not None and not isinstance(reason, str):
        raise ValidationError(f"resolve_ask reason must be a str or None, not {reason!r}")
    if approved:
        return attrs.evolve(verdict, decision="allow", reason=reason or verdict.reason)
    default = REJECTED_REASON if approved is False else NO_APPROVER_REASON
    return attrs.evolve(verdict, decision="deny", reason=reason or default)
