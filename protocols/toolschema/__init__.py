"""Tool schemas from typed Python functions, and model arguments checked and turned into values.

Pure and sans-IO. Six functions, and a class for streamed answers:

- :func:`signature_of` reads a function's signature, type hints and Google-style docstring into a
  :class:`ToolSignature`: a name, a one-paragraph description and a JSON Schema object of
  parameters, plus the resolved types and the defaults.
- :func:`schema_for` is the JSON Schema (Draft 2020-12) of one annotation.
- :func:`validate_arguments` lists every problem of a model's arguments against a schema, each as
  ``"<json path>: <message>"``; it never raises.
- :func:`structure_arguments` turns validated JSON arguments into typed Python values, and
  :func:`structure_value` one validated JSON value (a structured answer, say).
- :func:`partial_value` and :class:`PartialOutput`: a structured answer while it streams, the
  part of it known so far validated leniently (fields complete so far, each checked against its
  part of the schema; incomplete ones absent).

Supported annotations and their schemas:

=========================================  =========================================================
``str`` / ``int`` / ``float`` / ``bool``   ``string`` / ``integer`` / ``number`` / ``boolean``;
                                           a ``float`` parameter also accepts integers (made float)
``None``                                   ``{"type": "null"}``
``X | None``, ``Optional[X]``, ``Union``   ``anyOf`` of the members, in order
``Literal[...]`` (str, int, bool, None)    ``enum`` of the values with their ``type``
``Enum`` subclasses (scalar values)        ``enum`` of the member values with their ``type``
``list[X]``, ``Sequence[X]``               ``{"type": "array", "items": X}``
``tuple[X, ...]`` / ``tuple[X, Y]``        ``items`` / ``prefixItems`` with ``minItems = maxItems``
``dict[str, X]``, ``Mapping[str, X]``      ``{"type": "object", "additionalProperties": X}``
attrs classes, dataclasses                 an object of the ``__init__`` fields (by their init
                                           name), ``required`` = fields without a default (or
                                           default factory), ``additionalProperties: false``;
                                           nested classes inline
``TypedDict`` classes                      an object of its keys, ``required`` as ``total``,
                                           ``Required`` and ``NotRequired`` say,
                                           ``additionalProperties: false`` (typing's and
                                           typing_extensions' TypedDict)
pydantic (v2) models and dataclasses       pydantic's own schema (aliases, constraints,
                                           ``Field(description=...)``), normalised: its
                                           ``$defs`` inlined, the titles pydantic makes up from
                                           names dropped, objects closed unless the model allows
                                           extra fields
``Annotated[X, "text"]``                   X's schema with ``"description": "text"``
``Any``, ``object``                        ``{}`` (anything)
=========================================  =========================================================

Refused with :class:`~protocols.errors.ValidationError` naming the annotation and why: anything
else (``datetime`` outside a pydantic model, ``bytes``, ``set``, plain classes, type variables,
unresolved forward references, dicts with non-string keys, a dataclass ``InitVar``) and
**recursive classes** (attrs, dataclasses, TypedDicts, pydantic models). Schemas are always
inlined, never ``$ref``/``$defs``: not every vendor resolves references, and a tool's
arguments are a finite tree a model writes out anyway.

Descriptions: the description of an attrs class, a dataclass or a TypedDict is the summary of its
docstring (not the one ``@dataclass`` makes up), and each field's comes from the class
docstring's ``Attributes:`` section. An explicit ``Annotated`` text wins over a docstring entry,
which wins over the type's own description. Defaults are not written into the schema (they are
in :attr:`ToolSignature.defaults`; a pydantic model's schema has its own), but each is checked to
fit it.

pydantic stays optional: this package never imports it. A pydantic class is recognised through
the modules its user already loaded, and validated by pydantic itself (``model_validate``) after
the schema check, so its validators run; what pydantic refuses is reported as
``"<json path>: <pydantic's message>"``, without the value or a link.

Union values are structured by trying the members in the order written: the first that accepts
the JSON value wins (``str | Color`` keeps ``"red"`` a string; ``float | int`` makes ``1`` a
float). Written by hand rather than with a cattrs converter because structuring here runs after
validation against a schema generated from the same annotations, so it is a straight walk; doing
it ourselves keeps the JSON paths identical to :func:`validate_arguments` and the messages
bounded (cattrs' messages embed value reprs), and keeps ``bool`` apart from ``int`` in
``Literal``/``Enum`` lookups.
"""

from ._partial import PartialOutput as PartialOutput
from ._partial import partial_value as partial_value
from ._schema import MAX_PROBLEMS as MAX_PROBLEMS
from ._schema import ToolSignature as ToolSignature
from ._schema import schema_for as schema_for
from ._signature import signature_of as signature_of
from ._structure import structure_arguments as structure_arguments
from ._structure import structure_value as structure_value
from ._validate import validate_arguments as validate_arguments

__all__ = [
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
