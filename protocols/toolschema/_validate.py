"""A model's arguments checked against a schema: every problem, as the model reads it."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from jsonschema import Draft202012Validator, SchemaError
from jsonschema import ValidationError as SchemaViolation

from .._json import MAX_DEPTH, json_kind
from ._schema import _INT_BITS, _KEY_LIMIT, _NAME, _SCAN_LIMIT, MAX_PROBLEMS, _excerpt

# ---------------------------------------------------------------------------------------------
# Validation

#: A union whose arms all fit the value's type is reported arm by arm: at most this many arms,
#: this many problems of each, and this many characters in all.
_FORMS_SHOWN: Final = 4
_FORM_PROBLEMS: Final = 3
_UNION_LIMIT: Final = 600


def _key(key: str) -> str:
    return repr(_excerpt(key, _KEY_LIMIT))


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _NAME.fullmatch(key) and len(key) <= _KEY_LIMIT:
        return f"{path}.{key}"
    return f"{path}[{json.dumps(_excerpt(key, _KEY_LIMIT))}]"


def _path(parts: Iterable[str | int]) -> str:
    path = "$"
    for part in parts:
        path = _join(path, part)
    return path


_TYPE_WORDS: Final = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
    "array": "an array",
    "object": "an object",
}


def _expected_types(value: Any) -> str:
    names = value if isinstance(value, list) else [value]
    return " or ".join(_TYPE_WORDS.get(str(name), repr(name)) for name in names)


def _render(value: Any) -> str:
    try:
        return _excerpt(json.dumps(value, ensure_ascii=False), 60)
    except (TypeError, ValueError):
        return json_kind(value)


def _choices(values: Any) -> str:
    items = values if isinstance(values, list) else [values]
    shown = ", ".join(_render(value) for value in items[:20])
    return _excerpt(shown + (", ..." if len(items) > 20 else ""))


def _json_problems(value: Any, path: str, depth: int, out: list[tuple[str, str, bool]]) -> None:
    """Non-JSON values in a model's arguments: (path, message, fatal). Fatal ones stop the
    schema check (jsonschema could fail on them)."""
    if len(out) > MAX_PROBLEMS:
        return
    if depth > MAX_DEPTH:
        out.append((path, f"nested deeper than {MAX_DEPTH} levels", True))
    elif isinstance(value, float):
        if not math.isfinite(value):
            word = "NaN" if math.isnan(value) else "Infinity"
            out.append((path, f"{word} is not a valid number; numbers must be finite", False))
    elif isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > _INT_BITS:
            out.append((path, f"integer too large (more than {_INT_BITS} bits)", True))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _json_problems(item, _join(path, index), depth + 1, out)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                out.append((path, f"object key {_excerpt(repr(key), 60)} is not a string", True))
            else:
                _json_problems(item, _join(path, key), depth + 1, out)
    elif not (value is None or isinstance(value, str | bool)):
        out.append((path, f"{json_kind(value)} is not a JSON value", True))


#: A flat object schema's fast check: its properties' accepted Python types, the required
#: names, whether other keys are allowed.
_Flat = tuple[dict[str, Callable[[Any], bool]], frozenset[str], bool]

_VALIDATORS: dict[int, tuple[dict[str, Any], Draft202012Validator, _Flat | None]] = {}

# Property keywords that only annotate (they never make a value invalid).
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "deprecated"})


def _is_string(value: Any) -> bool:
    return type(value) is str


def _is_integer(value: Any) -> bool:
    return type(value) is int and value.bit_length() <= _INT_BITS


def _is_number(value: Any) -> bool:
    kind = type(value)
    if kind is float:
        return math.isfinite(value)
    return kind is int and value.bit_length() <= _INT_BITS


def _is_boolean(value: Any) -> bool:
    return type(value) is bool


_FLAT_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": _is_string,
    "integer": _is_integer,
    "number": _is_number,
    "boolean": _is_boolean,
}


def _flat(parameters: dict[str, Any]) -> _Flat | None:
    """The fast check of a flat schema -- an object whose properties are plain strings,
    integers, numbers or booleans, the commonest tool signature -- or None for any other."""
    if set(parameters) - {"type", "properties", "required", "additionalProperties", *_ANNOTATIONS}:
        return None
    properties = parameters.get("properties", {})
    required = parameters.get("required", [])
    additional = parameters.get("additionalProperties", True)
    if (
        parameters.get("type") != "object"
        or not isinstance(properties, dict)
        or not isinstance(required, list)
        or not all(isinstance(name, str) for name in required)
        or additional not in (True, False)
    ):
        return None
    checks: dict[str, Callable[[Any], bool]] = {}
    for name, schema in properties.items():
        if not isinstance(schema, dict) or set(schema) - {"type", *_ANNOTATIONS}:
            return None
        kind = schema.get("type")
        check = _FLAT_TYPES.get(kind) if isinstance(kind, str) else None
        if check is None:
            return None
        checks[name] = check
    return checks, frozenset(required), bool(additional)


def _flat_valid(flat: _Flat, arguments: Any) -> bool:
    """True only when ``arguments`` certainly satisfies the flat schema (False: unsure)."""
    checks, required, additional = flat
    if type(arguments) is not dict:
        return False
    for name, value in arguments.items():
        check = checks.get(name)
        if check is None:
            # An extra key the schema allows: sure only of a string under a string key.
            if not additional or type(name) is not str or type(value) is not str:
                return False
        elif not check(value):
            return False
    return required.issubset(arguments)


def _validator(parameters: dict[str, Any]) -> tuple[Draft202012Validator, _Flat | None]:
    """A checked validator for ``parameters`` and its fast check, if flat; cached by identity
    (schemas are read-only)."""
    cached = _VALIDATORS.get(id(parameters))
    if cached is not None and cached[0] is parameters:
        return cached[1], cached[2]
    Draft202012Validator.check_schema(parameters)
    validator = Draft202012Validator(parameters)
    flat = _flat(parameters)
    if len(_VALIDATORS) >= 256:
        _VALIDATORS.clear()
    _VALIDATORS[id(parameters)] = (parameters, validator, flat)
    return validator, flat


def validate_arguments(parameters: dict[str, Any], arguments: Any) -> list[str]:
    """Every problem of a model's ``arguments`` against the JSON Schema ``parameters``.

    Each problem is ``"<json path>: <message>"`` (paths like ``$.items[2].name``): unknown keys
    name the allowed ones (``$.x: unknown argument 'x'; allowed: a, b``), missing ones are named,
    a ``null`` where it is not allowed, ``NaN``/``Infinity`` (never valid here, although JSON
    Schema's ``number`` would take them), non-JSON values, wrong types, values outside an
    ``enum``. Validates with Draft 2020-12, format checks off. An empty list means valid.

    Guarantees: never raises, whatever the inputs; at most :data:`MAX_PROBLEMS` entries (the
    last then says more were left out), each bounded in size.
    """
    schema: Any = parameters  # typed as a dict, but any input must be answered
    try:
        if not isinstance(schema, dict):
            return ["$: the tool's parameter schema is not a JSON object"]
        try:
            validator, flat = _validator(schema)
        except SchemaError as exc:
            return [f"$: the tool's parameter schema is invalid: {_excerpt(exc.message)}"]
        # The hot path: a flat schema's valid arguments need no walk through jsonschema (which
        # costs tens of microseconds a call). Anything else, and every invalid value, takes
        # the general path, which names the problems.
        if flat is not None and _flat_valid(flat, arguments):
            return []
        return _problems(validator, arguments, top=True)
    except Exception as exc:
        return [f"$: the arguments could not be validated ({type(exc).__name__})"]


def _problems(validator: Draft202012Validator, arguments: Any, *, top: bool) -> list[str]:
    found: list[tuple[str, str, bool]] = []
    _json_problems(arguments, "$", 0, found)
    problems = [f"{path}: {message}" for path, message, _ in found]
    if not any(fatal for _, _, fatal in found):
        # Schema errors at or under a path already reported (a NaN) would only repeat it.
        flagged = tuple(f"{path}{mark}" for path, _, _ in found for mark in ":.[")
        seen = set(problems)
        for problem in _schema_problems(validator.iter_errors(arguments), top=top):
            if problem in seen or (flagged and problem.startswith(flagged)):
                continue
            seen.add(problem)
            problems.append(problem)
            if len(problems) > MAX_PROBLEMS:
                break
    if len(problems) > MAX_PROBLEMS:
        problems = [*problems[: MAX_PROBLEMS - 1], "$: more problems not shown"]
    return problems


def _bounded(errors: Iterable[SchemaViolation]) -> list[SchemaViolation]:
    out: list[SchemaViolation] = []
    for error in errors:
        out.append(error)
        if len(out) >= _SCAN_LIMIT:
            break
    return out


def _schema_problems(errors: Iterable[SchemaViolation], *, top: bool) -> Iterator[str]:
    errors = _bounded(errors)
    typed = {tuple(error.absolute_path) for error in errors if error.validator == "type"}
    for error in errors:
        where = tuple(error.absolute_path)
        if error.validator in ("enum", "const") and where in typed:
            continue  # "expected a string" already says it; the enum adds nothing
        yield from _messages(error, _path(where), top=top and not where)


def _messages(error: SchemaViolation, path: str, *, top: bool) -> Iterator[str]:
    kind, instance, value = error.validator, error.instance, error.validator_value
    noun = "argument" if top else "field"
    if kind == "type":
        expected = _expected_types(value)
        if instance is None:
            yield f"{path}: null is not allowed here; expected {expected}"
        else:
            yield f"{path}: expected {expected}, got {json_kind(instance)}"
    elif kind == "additionalProperties" and value is False and isinstance(instance, dict):
        schema = error.schema if isinstance(error.schema, dict) else {}
        known = list(schema.get("properties", {}))
        patterns = list(schema.get("patternProperties", {}))
        allowed = _excerpt(", ".join(known)) if known else "(none)"
        for key in instance:
            if key in known or any(re.search(pattern, key) for pattern in patterns):
                continue
            yield f"{_join(path, key)}: unknown {noun} {_key(key)}; allowed: {allowed}"
    elif kind == "required" and isinstance(instance, dict) and isinstance(value, list):
        for key in value:
            if isinstance(key, str) and key not in instance:
                yield f"{_join(path, key)}: missing required {noun} {_key(key)}"
    elif kind == "enum":
        yield f"{path}: expected one of {_choices(value)}, got {_render(instance)}"
    elif kind == "const":
        yield f"{path}: expected {_render(value)}, got {_render(instance)}"
    elif kind in ("minItems", "maxItems") and isinstance(instance, list):
        bound = "at least" if kind == "minItems" else "at most"
        yield f"{path}: expected {bound} {value} items, got {len(instance)}"
    elif kind in ("anyOf", "oneOf") and error.context:
        yield from _alternatives(error, path, top=top)
    else:
        yield f"{path}: {_excerpt(error.message)}"


def _alternatives(error: SchemaViolation, path: str, *, top: bool) -> Iterator[str]:
    """An ``anyOf``/``oneOf`` failure: the one arm whose JSON type fits; when several fit (a
    union of object shapes: argument sets), what each of them found wrong; else what every arm
    expects."""
    arms: dict[Any, list[SchemaViolation]] = {}
    for sub in error.context or ():
        arms.setdefault(sub.relative_schema_path[0], []).append(sub)
    fitting = [
        errs
        for errs in arms.values()
        if not any(sub.validator == "type" and not sub.relative_path for sub in errs)
    ]
    if len(fitting) == 1:
        yield from _schema_problems(fitting[0], top=top)
        return
    if len(fitting) > 1:
        forms = []
        for number, errs in enumerate(fitting[:_FORMS_SHOWN], 1):
            found = list(dict.fromkeys(_schema_problems(errs, top=top)))
            shown = "; ".join(found[:_FORM_PROBLEMS]) + (
                "; ..." if len(found) > _FORM_PROBLEMS else ""
            )
            forms.append(f"({number}) {shown}")
        more = " (...)" if len(fitting) > _FORMS_SHOWN else ""
        yield _excerpt(
            f"{path}: fits none of the {len(fitting)} accepted forms: {' '.join(forms)}{more}",
            _UNION_LIMIT,
        )
        return
    options = error.validator_value if isinstance(error.validator_value, list) else []
    words = " or ".join(dict.fromkeys(_option(option) for option in options))
    yield f"{path}: expected {_excerpt(words)}, got {json_kind(error.instance)}"


def _option(schema: Any) -> str:
    if not isinstance(schema, dict):
        return "a value of another form"
    if "enum" in schema:
        return f"one of {_choices(schema['enum'])}"
    if "const" in schema:
        return _render(schema["const"])
    if "type" in schema:
        return _expected_types(schema["type"])
    return "a value of another form"
