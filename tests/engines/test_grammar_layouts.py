"""Forced calls in the families whose calls are not Hermes-style JSON nor tagged:
Gemma 4 (`call:NAME{k:<|"|>v<|"|>}`), LFM2 (Python calls), Apertus (`{"NAME": {…}}`),
Nemotron Nano v2 and Phi-4-mini (JSON in their own markers). The grammar takes the call
as the family writes it (text as llama.cpp's test cases show it), refuses what the schema
refuses, and what it takes parses back (parsing/output.py) to the same call.

Run by llguidance over a byte-level vocabulary (test_grammar_refs.py): no model."""

from __future__ import annotations

from typing import Any

import jsonschema
import llguidance
import pytest

from parlance.core.events import ToolCallArgs, ToolCallStart
from parlance.core.tools import ToolSpec
from parlance.engines import grammar
from parlance.engines.parsing.output import OutputParser
from parlance.engines.parsing.syntax import SYNTAXES, ToolSyntax
from tests.support.grammar_text import accepts
from tests.support.parsed_calls import parsed_calls

SCHEMA = {"type": "object",
          "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                         "days": {"type": "integer", "minimum": 1, "maximum": 7},
                         "note": {"type": "string"},
                         "metric": {"type": "boolean"},
                         "tags": {"type": "array", "items": {"type": "string"}}},
          "required": ["city", "days"]}
TOOLS = (ToolSpec("get_weather", "The forecast", SCHEMA),
         ToolSpec("anything", "Takes any object", {"type": "object"}))
Q = '<|"|>'

# The family's own text for each call, as its model writes it.
WRITTEN: dict[str, dict[str, Any]] = {
    "gemma4": {
        f"<|tool_call>call:get_weather{{city:{Q}Paris{Q},days:3}}<tool_call|>":
            {"city": "Paris", "days": 3},
        f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q},days:7,note:{Q}a \"b\" <c>{Q},"
        f"metric:true,tags:[{Q}x{Q},{Q}y{Q}]}}<tool_call|>":
            {"city": "Oslo", "days": 7, "note": 'a "b" <c>', "metric": True, "tags": ["x", "y"]},
    },
    "lfm2": {
        '<|tool_call_start|>[get_weather(city="Paris", days=3)]<|tool_call_end|>':
            {"city": "Paris", "days": 3},
        '<|tool_call_start|>[get_weather(city="Oslo", days=7, note="a \\"b\\"", metric=False, '
        'tags=["x"])]<|tool_call_end|>':
            {"city": "Oslo", "days": 7, "note": 'a "b"', "metric": False, "tags": ["x"]},
    },
    "apertus": {
        '<|tools_prefix|>[{"get_weather": {"city": "Paris", "days": 3}}]<|tools_suffix|>':
            {"city": "Paris", "days": 3},
    },
    "nemotron_v2": {
        '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]'
        '</TOOLCALL>': {"city": "Paris", "days": 3},
    },
    "phi4": {
        '<|tool_call|>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}'
        '<|/tool_call|>': {"city": "Paris", "days": 3},
    },
}
REFUSED: dict[str, list[str]] = {
    "gemma4": [f"<|tool_call>call:get_weather{{city:{Q}Rome{Q},days:3}}<tool_call|>",
               f"<|tool_call>call:get_weather{{city:{Q}Paris{Q},days:9}}<tool_call|>",
               "<|tool_call>call:get_weather{days:3}<tool_call|>",
               f"<|tool_call>call:get_weather{{city:{Q}Paris{Q},days:3,x:1}}<tool_call|>",
               f"<|tool_call>call:get_wether{{city:{Q}Paris{Q},days:3}}<tool_call|>"],
    "lfm2": ['<|tool_call_start|>[get_weather(city="Rome", days=3)]<|tool_call_end|>',
             '<|tool_call_start|>[get_weather(days=3)]<|tool_call_end|>',
             '<|tool_call_start|>[get_weather(city="Paris", days=3, metric=true)]'
             '<|tool_call_end|>'],
    "apertus": ['<|tools_prefix|>[{"get_weather": {"city": "Paris", "days": 9}}]'
                '<|tools_suffix|>',
                '<|tools_prefix|>[{"name": "get_weather", "arguments": {"city": "Paris", '
                '"days": 3}}]<|tools_suffix|>'],
    "nemotron_v2": ['<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Rome", '
                    '"days": 3}}]</TOOLCALL>'],
    "phi4": ['<|tool_call|>{"name": "get_weather", "arguments": {"city": "Paris"}}'
             '<|/tool_call|>'],
}
PARALLEL = {
    "gemma4": (f"<|tool_call>call:get_weather{{city:{Q}Paris{Q},days:3}}<tool_call|>"
               f"<|tool_call>call:get_weather{{city:{Q}Oslo{Q},days:1}}<tool_call|>"),
    "lfm2": ('<|tool_call_start|>[get_weather(city="Paris", days=3), '
             'get_weather(city="Oslo", days=1)]<|tool_call_end|>'),
    "apertus": ('<|tools_prefix|>[{"get_weather": {"city": "Paris", "days": 3}}, '
                '{"get_weather": {"city": "Oslo", "days": 1}}]<|tools_suffix|>'),
    "nemotron_v2": ('<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris", '
                    '"days": 3}}, {"name": "get_weather", "arguments": {"city": "Oslo", '
                    '"days": 1}}]</TOOLCALL>'),
}


def parsed(syntax: ToolSyntax, text: str) -> list[tuple[str, Any]]:
    return parsed_calls(syntax, text, {t.name: t.parameters for t in TOOLS})


@pytest.mark.parametrize("name", WRITTEN)
@pytest.mark.parametrize("parallel", [False, True])
def test_forced_grammars_compile(name, parallel):
    syntax = SYNTAXES[name]
    for source in (grammar.forced_calls_grammar(TOOLS, syntax, parallel=parallel),
                   grammar.forced_calls_grammar(TOOLS, syntax, parallel=parallel,
                                                content_schema={"type": "object"}),
                   grammar.region_grammar(TOOLS, syntax, parallel=parallel)):
        assert llguidance.LLMatcher.validate_grammar(source) == ""


@pytest.mark.parametrize("name", WRITTEN)
def test_a_forced_call_is_the_familys_markup_and_parses_back(name):
    syntax = SYNTAXES[name]
    source = grammar.forced_calls_grammar(TOOLS[:1], syntax, parallel=False)
    for text, args in WRITTEN[name].items():
        assert accepts(source, text), text
        ((called, back),) = parsed(syntax, text)
        assert called == "get_weather" and back == args
        jsonschema.validate(back, SCHEMA)


@pytest.mark.parametrize("name", REFUSED)
def test_the_forced_grammar_refuses_what_the_schema_refuses(name):
    source = grammar.forced_calls_grammar(TOOLS[:1], SYNTAXES[name], parallel=False)
    for text in REFUSED[name]:
        assert not accepts(source, text), text


@pytest.mark.parametrize("name", PARALLEL)
def test_parallel_forced_calls_follow_one_another(name):
    syntax = SYNTAXES[name]
    text = PARALLEL[name]
    assert accepts(grammar.forced_calls_grammar(TOOLS[:1], syntax, parallel=True), text)
    assert not accepts(grammar.forced_calls_grammar(TOOLS[:1], syntax, parallel=False), text)
    assert [a for _, a in parsed(syntax, text)] == [{"city": "Paris", "days": 3},
                                                    {"city": "Oslo", "days": 1}]


@pytest.mark.parametrize(("name", "text"), [
    ("gemma4", f"<|tool_call>call:anything{{a:{Q}x{Q},b:[1,{{c:null}}]}}<tool_call|>"),
    ("lfm2", '<|tool_call_start|>[anything(a="x", b=[1, {"c": null}])]<|tool_call_end|>'),
    ("apertus", '<|tools_prefix|>[{"anything": {"a": "x", "b": [1, {"c": null}]}}]'
                '<|tools_suffix|>'),
])
def test_a_tool_with_no_listed_properties_takes_any_arguments(name, text):
    syntax = SYNTAXES[name]
    assert accepts(grammar.forced_calls_grammar(TOOLS[1:], syntax, parallel=False), text)
    assert parsed(syntax, text) == [("anything", {"a": "x", "b": [1, {"c": None}]})]


@pytest.mark.parametrize("name", ["lfm2", "apertus", "nemotron_v2"])
def test_the_region_grammar_of_a_list_takes_what_follows_its_marker(name):
    """After the model writes the marker by itself, the rest of the list is guided."""
    syntax = SYNTAXES[name]
    text = PARALLEL[name][len(syntax.open):]
    assert accepts(grammar.region_grammar(TOOLS[:1], syntax, parallel=True), text)


@pytest.mark.parametrize(("name", "text"), [
    ("lfm2", '<|tool_call_start|>[apply_patch(input="*** Begin Patch\\n+x")]'
             "<|tool_call_end|>"),
    ("gemma4", f"<|tool_call>call:apply_patch{{input:{Q}*** Begin Patch\n+x{Q}}}<tool_call|>"),
])
def test_a_freeform_tool_is_a_function_of_one_string_in_a_layout_without_raw_text(
        name, text):
    syntax = SYNTAXES[name]
    tool = ToolSpec("apply_patch", "Edits files", freeform=True)
    assert accepts(grammar.forced_calls_grammar([tool], syntax, parallel=False), text)
    parser = OutputParser(0, syntax=syntax, tool_names=frozenset({"apply_patch"}),
                          freeform=frozenset({"apply_patch"}))
    events = parser.push(text) + parser.finish()
    assert [e.name for e in events if isinstance(e, ToolCallStart)] == ["apply_patch"]
    assert "".join(e.fragment for e in events if isinstance(e, ToolCallArgs)) == (
        "*** Begin Patch\n+x")
