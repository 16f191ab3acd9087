"""protocols.toolschema, signatures: a Python function read as a tool definition."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import pytest
from jsonschema import Draft202012Validator
from toolschema_cases import (
    CallableTool,
    Color,
    Methods,
    Point,
    bad_attrs_default,
    bad_default,
    badly_named,
    described,
    enum_as_text,
    fetch,
    good_defaults,
    positional,
    recursive,
    rich,
    search,
    star_args,
    star_kwargs,
    unannotated,
    undocumented,
    unresolved,
    unsupported,
)

from protocols.errors import ValidationError
from protocols.messages import ToolDefinition
from protocols.toolschema import (
    signature_of,
)

# ---------------------------------------------------------------------------------------------
# signature_of


def test_signature_reads_name_summary_types_defaults_and_args_descriptions() -> None:
    signature = signature_of(search)
    assert signature.name == "search"
    assert signature.description == (
        "Search the index for documents. Matches are ranked by relevance."
    )
    assert signature.parameters == {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "description": "The text to look for; may span several words.",
            },
            "limit": {"type": "integer", "description": "At most this many results."},
            "exact": {"type": "boolean", "description": "Match the whole phrase only."},
        },
        "required": ["query"],
        "additionalProperties": False,
    }
    assert signature.types == {"query": str, "limit": int, "exact": bool}
    assert signature.defaults == {"limit": 10, "exact": False}


def test_annotated_text_wins_over_docstring_and_descriptions_may_start_below() -> None:
    signature = signature_of(described)
    properties = signature.parameters["properties"]
    assert signature.description == "Pay."
    assert properties["amount"] == {"type": "number", "description": "money, in euros"}
    assert properties["note"] == {
        "type": "string",
        "description": "The description starts on the next line.",
    }
    assert "description" not in properties["color"]
    assert signature.types["amount"] == Annotated[float, "money, in euros"]
    assert signature.defaults == {"note": "", "color": Color.GREEN}


def test_name_and_description_overrides_and_no_docstring() -> None:
    signature = signature_of(undocumented)
    assert (signature.name, signature.description) == ("undocumented", "")
    renamed = signature_of(search, name="find", description="Find things.")
    assert (renamed.name, renamed.description) == ("find", "Find things.")
    assert renamed.parameters == signature_of(search).parameters


def test_async_functions_methods_and_callable_objects() -> None:
    assert signature_of(fetch).parameters["properties"]["retries"] == {
        "anyOf": [{"type": "integer"}, {"type": "null"}]
    }
    method = signature_of(Methods().lookup)
    assert (method.name, method.description, method.types) == (
        "lookup",
        "Look a key up.",
        {"key": str},
    )
    assert signature_of(CallableTool(), name="double").types == {"n": int}
    with pytest.raises(ValidationError, match="needs a name"):
        signature_of(CallableTool())


def test_every_signature_is_a_valid_tool_definition() -> None:
    for function in (search, described, undocumented, fetch, rich, good_defaults):
        signature = signature_of(function)
        Draft202012Validator.check_schema(signature.parameters)
        definition = ToolDefinition(signature.name, signature.description, signature.parameters)
        assert definition.parameters == signature.parameters


def test_rich_signature_schema_covers_every_kind() -> None:
    signature = signature_of(rich)
    properties = signature.parameters["properties"]
    assert list(properties) == list(signature.types)
    assert signature.parameters["required"] == list(signature.types)[:-2]
    assert properties["choice"] == {"type": ["string", "integer"], "enum": ["a", "b", 3]}
    assert properties["note"] == {"type": "string", "description": "a note"}
    assert properties["anything"] == {}
    assert properties["extra"]["anyOf"][1] == {"type": "null"}


def test_defaults_that_fit_are_accepted_in_their_python_form() -> None:
    signature = signature_of(good_defaults)
    assert signature.defaults == {
        "point": Point(1.0),
        "color": Color.RED,
        "pair": (1, "a"),
        "names": (),
        "ratio": 1,
    }
    assert signature.parameters["required"] == []


REFUSED_SIGNATURES: list[tuple[Callable[..., Any], str]] = [
    (star_args, "tool 'star_args', parameter 'values': *values is not supported"),
    (star_kwargs, "tool 'star_kwargs', parameter 'values': **values is not supported"),
    (positional, "tool 'positional', parameter 'value': positional-only parameters"),
    (unannotated, "tool 'unannotated', parameter 'value': no type annotation"),
    (
        bad_default,
        "tool 'bad_default', parameter 'count': the default None does not fit the parameter's "
        "schema: $: null is not allowed here; expected an integer",
    ),
    (bad_attrs_default, "$: not a value of type toolschema_cases.Point"),
    (enum_as_text, "$: not a value of type toolschema_cases.Color"),
    (unsupported, "tool 'unsupported', parameter 'when': unsupported annotation datetime."),
    (unresolved, "tool 'unresolved': cannot resolve its type hints: name 'Missing'"),
    (recursive, "tool 'recursive', parameter 'node': "),
    (badly_named, "ToolDefinition.name must be 1-64 ASCII letters"),
]


@pytest.mark.parametrize(
    ("function", "fragment"),
    REFUSED_SIGNATURES,
    ids=[getattr(f, "__name__", "?") for f, _ in REFUSED_SIGNATURES],
)
def test_signature_refusals_name_the_tool_parameter_and_reason(
    function: Callable[..., Any], fragment: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        signature_of(function)
    assert fragment in caught.value.message


def test_bad_names_given_explicitly_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"ToolDefinition\.name"):
        signature_of(search, name="has space")


def test_docstring_sections_other_than_args_never_leak_into_the_summary() -> None:
    def tool(a: int) -> None:
        """Do it.
        Args:
            a: An int.
            ghost: Not a parameter; ignored.
        Example:
            tool(1)
        """

    signature = signature_of(tool)
    assert signature.description == "Do it."
    assert signature.parameters["properties"]["a"]["description"] == "An int."
    assert "ghost" not in signature.parameters["properties"]
