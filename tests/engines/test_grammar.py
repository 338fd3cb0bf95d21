"""Grammar construction: closed objects, schema checks, one grammar per call syntax."""

from __future__ import annotations

import llguidance
import pytest

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest
from parlance.core.tools import ResponseFormat, ToolChoice, ToolSpec
from parlance.engines import grammar
from parlance.engines.parsing.syntax import HERMES, LLAMA3_JSON, MISTRAL

TOOLS = (ToolSpec("get_weather", parameters={"type": "object",
                                             "properties": {"city": {"type": "string"}}}),
         ToolSpec("get_time"))


def test_objects_with_properties_are_closed_unless_they_say_otherwise():
    schema = {"type": "object", "properties": {
        "a": {"type": "object", "properties": {"b": {"type": "integer"}}},
        "c": {"type": "array", "items": {"properties": {"d": {}}}},
        "e": {"type": "object", "properties": {}, "additionalProperties": True}},
        "$defs": {"x": {"anyOf": [{"properties": {"y": {}}}]}}}
    out = grammar.closed(schema)
    assert out["additionalProperties"] is False
    assert out["properties"]["a"]["additionalProperties"] is False
    assert out["properties"]["c"]["items"]["additionalProperties"] is False
    assert out["properties"]["e"]["additionalProperties"] is True
    assert out["$defs"]["x"]["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in grammar.closed({"type": "object"})  # any object
    assert "additionalProperties" not in schema  # the client's schema is left alone


@pytest.mark.parametrize("schema", [
    {"type": "strin"},
    {"type": "string", "minLength": 5, "maxLength": 2},
    {"$ref": "#/$defs/missing"},
    "not a schema",
])
def test_schema_problems_are_found(schema):
    assert grammar.schema_problem(schema)


def test_a_value_llguidance_panics_on_is_a_refusal_not_a_crash():
    # llguidance cuts a bad value to 100 bytes for its message; inside a 4-byte
    # character that was a Rust panic (a BaseException), which became a 500
    value = ["a" * 94 + "\U0009c86d" + "bbbb"]
    for key in ("$ref", "format", "maxProperties"):
        assert grammar.schema_problem({key: value})


def test_keywords_llguidance_does_not_implement_are_not_refused():
    """(They are checked on the finished value: `engines/output_check.py`.)"""
    schema = {"type": "object", "propertyNames": {"pattern": "^[a-z]+$"},
              "additionalProperties": {"type": "string"}}
    assert grammar.schema_problem(schema) is None


LOOPS = {
    "A → B → A": {"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}},
                  "type": "object", "properties": {"x": {"$ref": "#/$defs/A"}}},
    "A → A": {"$defs": {"A": {"$ref": "#/$defs/A"}}, "type": "object",
              "properties": {"x": {"$ref": "#/$defs/A"}}},
    "the root": {"$ref": "#"},
    "through allOf": {"allOf": [{"$ref": "#/$defs/A"}],
                      "$defs": {"A": {"allOf": [{"$ref": "#"}]}}},
    "every option": {"anyOf": [{"$ref": "#"}, {"$ref": "#/$defs/A"}],
                     "$defs": {"A": {"$ref": "#"}}},
}


@pytest.mark.parametrize("name", list(LOOPS))
def test_a_ref_that_reaches_no_schema_is_refused(name):
    """Issue 39: llguidance compiled these into a grammar that accepts nothing."""
    problem = grammar.schema_problem(LOOPS[name])
    assert problem is not None and "$ref" in problem


@pytest.mark.parametrize("schema", [
    {"$defs": {"T": {"type": "object", "properties": {"kids": {
        "type": "array", "items": {"$ref": "#/$defs/T"}}}}}, "$ref": "#/$defs/T"},
    {"anyOf": [{"$ref": "#"}, {"type": "string"}]},  # one option reaches a schema
    {"$defs": {"unused": {"$ref": "#/$defs/unused"}}, "type": "string"},
])
def test_recursion_that_reaches_a_schema_is_fine(schema):
    assert grammar.schema_problem(schema) is None


def test_check_schemas_names_the_clients_parameter():
    bad = ToolSpec("f", parameters={"type": "strin"}, param="tools[3].parameters")
    request = GenerationRequest(model="m", prompts=(ChatInput((Message("user", "x"),)),),
                                tools=(TOOLS[0], bad))
    with pytest.raises(InvalidRequest) as caught:
        grammar.check_schemas(request)
    assert caught.value.param == "tools[3].parameters"
    assert "strin" in caught.value.message
    fmt = ResponseFormat("json_schema", {"type": "array", "minItems": 3, "maxItems": 1},
                         param="text.format.schema")
    with pytest.raises(InvalidRequest) as caught:
        grammar.check_schemas(GenerationRequest(model="m", prompts=request.prompts,
                                                response_format=fmt))
    assert caught.value.param == "text.format.schema"
    # tools the model may not call are not checked (tool_choice none)
    grammar.check_schemas(GenerationRequest(model="m", prompts=request.prompts,
                                            tools=(bad,), tool_choice=ToolChoice("none")))


@pytest.mark.parametrize("syntax", [HERMES, MISTRAL, LLAMA3_JSON])
@pytest.mark.parametrize("parallel", [False, True])
def test_every_syntax_has_valid_forced_and_region_grammars(syntax, parallel):
    for source in (grammar.forced_calls_grammar(TOOLS, syntax, parallel=parallel),
                   grammar.forced_calls_grammar(TOOLS, syntax, parallel=parallel,
                                                content_schema={"type": "object"}),
                   grammar.region_grammar(TOOLS, syntax, parallel=parallel)):
        assert llguidance.LLMatcher.validate_grammar(source) == ""


def test_special_token_markers_are_spelled_by_the_engine():
    source = grammar.forced_calls_grammar(TOOLS, HERMES, parallel=False,
                                          literal=lambda m: "<[7]>")
    assert '<[7]> "\\n" call "\\n" <[7]>' in source
