"""Forced calls in each family's own markup (syntax.py's tagged syntaxes): the grammar
takes the call as the family writes it, refuses what the schema refuses, and what it
takes parses back (parsing/output.py) to the same schema-valid call.

Run by llguidance over a byte-level vocabulary (test_grammar_refs.py): no model."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import llguidance
import pytest

from parlance.core.tools import ToolSpec
from parlance.engines import grammar
from parlance.engines.parsing.syntax import SYNTAXES, Tagged, ToolSyntax
from tests.support.grammar_text import accepts
from tests.support.parsed_calls import parsed_calls

SCHEMA = {"type": "object",
          "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                         "days": {"type": "integer", "minimum": 1, "maximum": 7},
                         "note": {"type": "string"}},
          "required": ["city", "days"]}
TOOLS = (ToolSpec("get_weather", "The forecast", SCHEMA),
         ToolSpec("anything", "Takes any object", {"type": "object"}))
TAGGED = [s for s in SYNTAXES.values() if s.tagged is not None]


def written(tags: Tagged, name: str, args: dict[str, Any]) -> str:
    """A call as the family writes it (the layout the grammar forces)."""
    if tags.params is None:
        body = json.dumps(args)
    else:
        p = tags.params
        body = "".join(
            f"{p.key_open}{k}{p.key_close}"
            f"{(p.attrs[0] if isinstance(v, str) else p.attrs[1]) if p.attrs else ''}"
            f"{p.value_open}{p.pad}"
            f"{v if isinstance(v, str) else json.dumps(v)}{p.pad}{p.value_close}\n"
            for k, v in args.items())
    return f"{tags.before_name}{name}{tags.after_name}{body}{tags.after_args}"


def parsed(syntax: ToolSyntax, text: str) -> list[tuple[str, Any]]:
    return parsed_calls(syntax, text, {t.name: t.parameters for t in TOOLS})


@pytest.mark.parametrize("syntax", TAGGED, ids=lambda s: s.name)
@pytest.mark.parametrize("parallel", [False, True])
def test_forced_grammars_compile(syntax, parallel):
    for source in (grammar.forced_calls_grammar(TOOLS, syntax, parallel=parallel),
                   grammar.forced_calls_grammar(TOOLS, syntax, parallel=parallel,
                                                content_schema={"type": "object"})):
        assert llguidance.LLMatcher.validate_grammar(source) == ""


@pytest.mark.parametrize("syntax", TAGGED, ids=lambda s: s.name)
def test_a_forced_call_is_the_familys_markup_and_parses_back(syntax):
    source = grammar.forced_calls_grammar(TOOLS[:1], syntax, parallel=False)
    assert syntax.tagged is not None
    for args in ({"city": "Paris", "days": 3}, {"city": "Oslo", "days": 7, "note": "a <b>"}):
        text = written(syntax.tagged, "get_weather", args)
        assert accepts(source, text), text
        ((name, back),) = parsed(syntax, text)
        assert name == "get_weather" and back == args
        jsonschema.validate(back, SCHEMA)


@pytest.mark.parametrize("syntax", TAGGED, ids=lambda s: s.name)
def test_the_forced_grammar_refuses_what_the_schema_refuses(syntax):
    source = grammar.forced_calls_grammar(TOOLS[:1], syntax, parallel=False)
    assert syntax.tagged is not None
    for args in ({"city": "Rome", "days": 3}, {"city": "Paris"}, {"city": "Paris", "days": 9},
                 {"city": "Paris", "days": 3, "extra": "x"}):
        assert not accepts(source, written(syntax.tagged, "get_weather", args)), args
    assert not accepts(source, written(syntax.tagged, "get_wether",
                                       {"city": "Paris", "days": 3}))


@pytest.mark.parametrize("syntax", TAGGED, ids=lambda s: s.name)
def test_parallel_forced_calls_follow_one_another(syntax):
    source = grammar.forced_calls_grammar(TOOLS[:1], syntax, parallel=True)
    assert syntax.tagged is not None
    one = written(syntax.tagged, "get_weather", {"city": "Paris", "days": 3})
    two = written(syntax.tagged, "get_weather", {"city": "Oslo", "days": 1})
    text = one + syntax.list_sep + two
    assert accepts(source, text)
    assert [a for _, a in parsed(syntax, text)] == [{"city": "Paris", "days": 3},
                                                    {"city": "Oslo", "days": 1}]


def test_a_tool_with_no_listed_properties_takes_any_parameters():
    syntax = SYNTAXES["qwen3_coder"]
    source = grammar.forced_calls_grammar(TOOLS[1:], syntax, parallel=False)
    assert syntax.tagged is not None
    assert accepts(source, written(syntax.tagged, "anything", {"a": "x", "b_2": "y"}))
