"""pydantic models (and pydantic dataclasses) as tool and output types, without importing pydantic.

pydantic is optional: nothing here imports it. A pydantic class can only exist once the user has
imported pydantic, so a class is recognised through the modules already loaded
(``sys.modules``), and pydantic's own API is reached through the class itself (its
``model_json_schema``/``model_validate``) or through the loaded module. Without pydantic loaded,
every function here answers "not a pydantic class" at the cost of a dict lookup.

The schema is pydantic's own (``model_json_schema()``, validation mode: aliases, constraints,
``Field(description=...)``, the docstring), made to look like every other schema of this
package: its ``$defs`` inlined (no ``$ref`` is left: not every vendor resolves them, and a
nested schema's references would point at the wrong root), the titles pydantic makes up from
field and class names dropped (a title set on purpose stays), OpenAPI's ``discriminator``
dropped (its mapping names the inlined ``$defs``; the ``oneOf`` of members with a ``const`` tag
says the same), and each object of named fields closed (``additionalProperties: false``) unless
the model allows extra fields. A recursive model has no finite inlined form and is refused, as
a recursive attrs class is.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from collections.abc import Callable
from typing import Any, Final

from .._schema_root import ONE_SUBSCHEMA as _ONE
from .._schema_root import SUBSCHEMA_LISTS as _LIST
from ..errors import ValidationError

#: The most schema nodes an inlined pydantic schema may have (a model that reuses a large model
#: many times over inlines to many copies of it).
MAX_INLINED: Final = 5000

#: Keywords whose value maps names (or patterns) to subschemas.
_MAP: Final = frozenset({"properties", "patternProperties", "dependentSchemas"})


def _base_model() -> type | None:
    main = sys.modules.get("pydantic.main")  # where BaseModel lives; loaded by any model
    base = getattr(main, "BaseModel", None) if main is not None else None
    return base if isinstance(base, type) else None


def is_pydantic_model(annotation: Any) -> bool:
    """Whether ``annotation`` is a pydantic (v2) ``BaseModel`` subclass. Never imports pydantic."""
    base = _base_model()
    return base is not None and isinstance(annotation, type) and issubclass(annotation, base)


def is_pydantic_v1_model(annotation: Any) -> bool:
    """Whether ``annotation`` is a model of pydantic's v1 API (``pydantic.v1.BaseModel``)."""
    main = sys.modules.get("pydantic.v1.main")
    base = getattr(main, "BaseModel", None) if main is not None else None
    return isinstance(base, type) and isinstance(annotation, type) and issubclass(annotation, base)


def is_pydantic_dataclass(annotation: Any) -> bool:
    """Whether ``annotation`` is a class made by ``pydantic.dataclasses.dataclass``."""
    return (
        "pydantic" in sys.modules
        and isinstance(annotation, type)
        and dataclasses.is_dataclass(annotation)
        and "__pydantic_validator__" in vars(annotation)
    )


def is_pydantic(annotation: Any) -> bool:
    """A pydantic model or a pydantic dataclass."""
    return is_pydantic_model(annotation) or is_pydantic_dataclass(annotation)


@functools.lru_cache(maxsize=256)
def _adapter(cls: type) -> Any:
    """pydantic's ``TypeAdapter`` of a pydantic dataclass (pydantic is loaded: it made it)."""
    return sys.modules["pydantic"].TypeAdapter(cls)


def _describe(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _excerpt(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def pydantic_schema(cls: type) -> dict[str, Any]:
    """The JSON Schema of a pydantic class, inlined and normalised (see the module docstring).

    Raises :class:`~protocols.errors.ValidationError` naming the class when pydantic cannot give
    one, when the model is recursive, or when it inlines to more than :data:`MAX_INLINED` nodes.
    """
    try:
        if is_pydantic_model(cls):
            raw = cls.model_json_schema()  # type: ignore[attr-defined]
        else:
            raw = _adapter(cls).json_schema()
    except Exception as exc:
        raise ValidationError(
            f"unsupported annotation {_describe(cls)}: pydantic gives no JSON Schema for it: "
            f"{_excerpt(str(exc) or type(exc).__name__)}"
        ) from None
    return _Inline(cls, raw).root()


class _Inline:
    """One normalisation: references replaced by (copies of) their definitions."""

    def __init__(self, cls: type, raw: dict[str, Any]) -> None:
        self.cls = cls
        self.raw = raw
        defs = raw.get("$defs")
        self.defs: dict[str, Any] = defs if isinstance(defs, dict) else {}
        self.nodes = 0

    def root(self) -> dict[str, Any]:
        root = {key: value for key, value in self.raw.items() if key != "$defs"}
        schema = self.schema(root, (), names=(self.cls.__name__,))
        return schema if isinstance(schema, dict) else {}

    def schema(self, node: Any, stack: tuple[str, ...], *, names: tuple[str, ...] = ()) -> Any:
        """A copy of subschema ``node``; ``names`` are the names pydantic would make its title
        of (the field's, the class's)."""
        self.nodes += 1
        if self.nodes > MAX_INLINED:
            raise ValidationError(
                f"unsupported annotation {_describe(self.cls)}: its JSON Schema has more than "
                f"{MAX_INLINED} nodes once its definitions are inlined"
            )
        if not isinstance(node, dict):
            return node
        reference = node.get("$ref")
        if isinstance(reference, str) and reference.startswith("#/$defs/"):
            name = reference[len("#/$defs/") :]
            if name in stack:
                chain = " -> ".join((*stack[stack.index(name) :], name))
                raise ValidationError(
                    f"unsupported annotation {_describe(self.cls)}: recursive models are not "
                    f"supported ({chain}); schemas are inlined, without $ref"
                )
            if name not in self.defs:
                raise ValidationError(
                    f"unsupported annotation {_describe(self.cls)}: its JSON Schema refers to "
                    f"{reference!r}, which it does not define"
                )
            target = self.schema(self.defs[name], (*stack, name), names=(name,))
            siblings = {key: value for key, value in node.items() if key != "$ref"}
            merged = dict(target) if isinstance(target, dict) else {}
            merged.update(self.keywords(siblings, stack, names))
            return merged
        return self.keywords(node, stack, names)

    def keywords(
        self, node: dict[str, Any], stack: tuple[str, ...], names: tuple[str, ...]
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _ONE and isinstance(value, dict | bool):
                out[key] = self.schema(value, stack)
            elif key in _LIST and isinstance(value, list):
                out[key] = [self.schema(item, stack) for item in value]
            elif key in _MAP and isinstance(value, dict):
                out[key] = {
                    name: self.schema(item, stack, names=(name,)) for name, item in value.items()
                }
            elif key == "$defs" or (key == "title" and _made_up(value, names)):
                continue
            elif key == "discriminator" and isinstance(value, dict) and "propertyName" in value:
                continue  # OpenAPI's, not JSON Schema's; its mapping names the $defs inlined
            else:
                out[key] = value  # data: enum, const, default, examples, description, ...
        if (
            out.get("type") == "object"
            and isinstance(out.get("properties"), dict)
            and "additionalProperties" not in out
            and "patternProperties" not in out
        ):
            out["additionalProperties"] = False
        return out


def _made_up(title: Any, names: tuple[str, ...]) -> bool:
    """Whether ``title`` is the one pydantic derives from a field's or a class's name."""
    if not isinstance(title, str):
        return False
    for name in names:
        base = name.rsplit("__", 1)[-1]  # a $defs key may be qualified: module__Name
        if title in (name, base, name.title().replace("_", " ").strip()):
            return True
        if re.sub(r"[^A-Za-z0-9_]", "_", title) == base:  # a generic model: Box[int], Box_int_
            return True
    return False


def pydantic_validator(cls: type) -> Callable[[Any], Any]:
    """What builds an instance of a pydantic class from JSON data (raising pydantic's errors)."""
    if is_pydantic_model(cls):
        validate: Callable[[Any], Any] = cls.model_validate  # type: ignore[attr-defined]
        return validate
    return _adapter(cls).validate_python  # type: ignore[no-any-return]


def pydantic_problems(
    error: BaseException, join: Callable[[str, str | int], str], path: str
) -> list[str] | None:
    """The problems of a pydantic ``ValidationError``, one ``"<json path>: <message>"`` each (no
    input values, no links), or ``None`` when ``error`` is not one."""
    module = sys.modules.get("pydantic_core")
    kind = getattr(module, "ValidationError", None) if module is not None else None
    if not isinstance(kind, type) or not isinstance(error, kind):
        return None
    problems: list[str] = []
    for entry in error.errors(include_url=False, include_context=False, include_input=False):  # type: ignore[attr-defined]
        where = path
        for part in entry.get("loc", ()):
            where = join(where, part if isinstance(part, int) else str(part))
        message = str(entry.get("msg", "invalid"))
        message = message.removeprefix("Value error, ")
        problems.append(f"{where}: {_excerpt(message)}")
    return problems or [f"{path}: invalid"]


def pydantic_dump(value: Any) -> Any:
    """A pydantic instance's JSON data by alias: what its (validation) schema describes, so
    without computed fields where pydantic can leave them out (2.12 and later)."""
    if is_pydantic_model(type(value)):
        dump: Callable[..., Any] = value.model_dump
    else:
        adapter = _adapter(value.__class__)
        dump = functools.partial(adapter.dump_python, value)
    try:
        return dump(mode="json", by_alias=True, exclude_computed_fields=True)
    except TypeError:  # an older pydantic
        return dump(mode="json", by_alias=True)
