"""Forced calls in the families whose calls are a list (syntax.py): Llama 4's pythonic
`[get_weather(city="Paris")]`, Command R7B's `<|START_ACTION|>[{"tool_call_id": …,
"tool_name": …, "parameters": …}]<|END_ACTION|>`, Granite's `<|tool_call|>[…]` and
FireFunction v2's ` functools[…]`. The grammar takes the calls as the family writes
them, refuses what the schema refuses, and what it takes parses back
(parsing/output.py) to the same schema-valid calls.

Run by llguidance over a byte-level vocabulary (test_grammar_refs.py): no model."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import llguidance
import pytest

from parlance.core.events import ToolCallArgs, ToolCallStart
from parlance.core.tools import ToolSpec
from parlance.engines import grammar
from parlance.engines.parsing.output import OutputParser
from parlance.engines.parsing.syntax import (
    COMMAND_R7B,
    FIREFUNCTION_V2,
    GRANITE,
    LLAMA3_JSON,
    LLAMA4_PYTHONIC,
    ToolSyntax,
)
from tests.support.grammar_text import accepts
from tests.support.parsed_calls import parsed_calls

SCHEMA = {"type": "object",
          "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                         "days": {"type": "integer", "minimum": 1, "maximum": 7},
                         "note": {"type": "string"}},
          "required": ["city", "days"]}
TOOLS = (ToolSpec("get_weather", "The forecast", SCHEMA),
         ToolSpec("anything", "Takes any object", {"type": "object"}))
LISTS = [LLAMA4_PYTHONIC, COMMAND_R7B, GRANITE, FIREFUNCTION_V2]


def written(syntax: ToolSyntax, calls: list[tuple[str, dict[str, Any]]]) -> str:
    """Calls as the family writes them (the layout the grammar forces)."""
    items = []
    for n, (name, args) in enumerate(calls):
        if syntax.region == "pythonic":
            pairs = ", ".join(f"{k}={json.dumps(v)}" for k, v in args.items())
            items.append(f"{name}({pairs})")
        elif syntax.id_key:
            items.append(json.dumps({syntax.id_key: str(n), syntax.name_key: name,
                                     syntax.args_key: args}))
        else:
            items.append(json.dumps({"name": name, syntax.args_key: args}))
    return syntax.list_open + syntax.list_sep.join(items) + syntax.list_close


def parsed(syntax: ToolSyntax, text: str) -> list[tuple[str, Any]]:
    return parsed_calls(syntax, text, {t.name: t.parameters for t in TOOLS})


@pytest.mark.parametrize("syntax", LISTS, ids=lambda s: s.name)
@pytest.mark.parametrize("parallel", [False, True])
def test_forced_grammars_compile(syntax, parallel):
    for source in (grammar.forced_calls_grammar(TOOLS, syntax, parallel=parallel),
                   grammar.forced_calls_grammar(TOOLS, syntax, parallel=parallel,
                                                content_schema={"type": "object"})):
        assert llguidance.LLMatcher.validate_grammar(source) == ""


@pytest.mark.parametrize("syntax", LISTS, ids=lambda s: s.name)
def test_a_forced_call_is_the_familys_markup_and_parses_back(syntax):
    source = grammar.forced_calls_grammar(TOOLS[:1], syntax, parallel=False)
    for args in ({"city": "Paris", "days": 3}, {"city": "Oslo", "days": 7, "note": "a (b), c"}):
        text = written(syntax, [("get_weather", args)])
        assert accepts(source, text), text
        ((name, back),) = parsed(syntax, text)
        assert name == "get_weather" and back == args
        jsonschema.validate(back, SCHEMA)


@pytest.mark.parametrize("syntax", LISTS, ids=lambda s: s.name)
def test_the_forced_grammar_refuses_what_the_schema_refuses(syntax):
    source = grammar.forced_calls_grammar(TOOLS[:1], syntax, parallel=False)
    for args in ({"city": "Rome", "days": 3}, {"city": "Paris"}, {"city": "Paris", "days": 9},
                 {"city": "Paris", "days": 3, "extra": "x"}):
        assert not accepts(source, written(syntax, [("get_weather", args)])), args
    assert not accepts(source, written(syntax, [("get_wether", {"city": "Paris", "days": 3})]))


@pytest.mark.parametrize("syntax", LISTS, ids=lambda s: s.name)
def test_parallel_forced_calls_are_one_list(syntax):
    calls = [("get_weather", {"city": "Paris", "days": 3}),
             ("get_weather", {"city": "Oslo", "days": 1})]
    text = written(syntax, calls)
    assert accepts(grammar.forced_calls_grammar(TOOLS[:1], syntax, parallel=True), text)
    assert not accepts(grammar.forced_calls_grammar(TOOLS[:1], syntax, parallel=False), text)
    assert parsed(syntax, text) == calls


def test_a_pythonic_tool_with_no_listed_properties_takes_any_keywords():
    source = grammar.forced_calls_grammar(TOOLS[1:], LLAMA4_PYTHONIC, parallel=False)
    assert accepts(source, '[anything(a="x", b_2=[1, 2])]')
    assert accepts(source, "[anything()]")
    assert parsed(LLAMA4_PYTHONIC, '[anything(a="x", b_2=[1, 2])]') == [
        ("anything", {"a": "x", "b_2": [1, 2]})]


def test_optional_pythonic_keywords_come_at_most_once_each():
    schema = {"type": "object", "properties": {"a": {"type": "integer"},
                                               "b": {"type": "integer"}}}
    source = grammar.forced_calls_grammar([ToolSpec("f", "", schema)], LLAMA4_PYTHONIC,
                                          parallel=False)
    for text in ("[f()]", "[f(a=1)]", "[f(b=2)]", "[f(a=1, b=2)]"):
        assert accepts(source, text), text
    for text in ("[f(a=1, a=2)]", "[f(b=2, a=1)]", "[f(a=1,)]"):
        assert not accepts(source, text), text


def test_a_forced_llama3_builtin_call_is_written_as_the_model_was_trained_to():
    """Llama 3.1 calls its builtin tools as `<|python_tag|>name.call(key=value)` (what
    llama.cpp's grammar forces too); other tools stay JSON."""
    search = ToolSpec("brave_search", "Web search",
                      {"type": "object", "properties": {"query": {"type": "string"}},
                       "required": ["query"]})
    source = grammar.forced_calls_grammar([search, TOOLS[0]], LLAMA3_JSON, parallel=False)
    text = '<|python_tag|>brave_search.call(query="news (today)")'
    assert accepts(source, text)
    assert not accepts(source, '{"name": "brave_search", "parameters": {"query": "news"}}')
    assert accepts(source, '{"name": "get_weather", "parameters": {"city": "Oslo", "days": 2}}')
    parser = OutputParser(0, syntax=LLAMA3_JSON, tool_names=frozenset({"brave_search"}))
    events = parser.push(text) + parser.finish()
    assert [e.name for e in events if isinstance(e, ToolCallStart)] == ["brave_search"]
    args = "".join(e.fragment for e in events if isinstance(e, ToolCallArgs))
    assert json.loads(args) == {"query": "news (today)"}
