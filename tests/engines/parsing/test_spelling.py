"""Calls written out in each family's markup (spelling.py: LFM2's history, the example of
a built-in tool description) read back by that family's parser as the same calls, and in
the exact text the families' own templates and llama.cpp's cases show."""

from __future__ import annotations

from typing import Any

import pytest

from parlance.engines.parsing.formats import format_named
from parlance.engines.parsing.spelling import spell_calls
from parlance.engines.parsing.syntax import SYNTAXES, ToolSyntax
from tests.support.parsed_calls import parsed_calls

CALLS = [("get_weather", {"city": "São Paulo", "note": 'say "hi"\nthen go', "days": 3,
                          "metric": True, "extra": None, "tags": ["a", "b"],
                          "where": {"lat": 1.5, "lon": -2}}),
         ("get_time", {"city": "Tokyo"})]
SCHEMAS = {"get_weather": {"type": "object", "properties": {
    "city": {"type": "string"}, "note": {"type": "string"}, "days": {"type": "integer"},
    "metric": {"type": "boolean"}, "extra": {"type": "null"},
    "tags": {"type": "array"}, "where": {"type": "object"}}},
    "get_time": {"type": "object", "properties": {"city": {"type": "string"}}}}


def parsed(syntax: ToolSyntax, text: str, markup: tuple[str, ...] = ()) -> list[tuple[str, Any]]:
    return parsed_calls(syntax, text, SCHEMAS, markup=markup, streamed=True)


@pytest.mark.parametrize("name", sorted(SYNTAXES))
def test_spelled_calls_parse_back_streamed(name):
    syntax = SYNTAXES[name]
    markup = format_named(name).markup if name in ("harmony",) else ()
    assert parsed(syntax, spell_calls(syntax, CALLS), markup) == CALLS


@pytest.mark.parametrize(("name", "text"), [
    ("lfm2", '<|tool_call_start|>[get_time(city="Tokyo"), toggle(enabled=True, x=None)]'
             "<|tool_call_end|>"),
    ("gemma4", '<|tool_call>call:get_time{city:<|"|>Tokyo<|"|>}<tool_call|>'
               '<|tool_call>call:toggle{enabled:true,x:null}<tool_call|>'),
    ("apertus", '<|tools_prefix|>[{"get_time": {"city": "Tokyo"}}, '
                '{"toggle": {"enabled": true, "x": null}}]<|tools_suffix|>'),
    ("nemotron_v2", '<TOOLCALL>[{"name": "get_time", "arguments": {"city": "Tokyo"}}, '
                    '{"name": "toggle", "arguments": {"enabled": true, "x": null}}]</TOOLCALL>'),
    ("phi4", '<|tool_call|>{"name": "get_time", "arguments": {"city": "Tokyo"}}<|/tool_call|>'
             '<|tool_call|>{"name": "toggle", "arguments": {"enabled": true, "x": null}}'
             "<|/tool_call|>"),
    ("deepseek_v3_2", '<｜DSML｜function_calls>\n<｜DSML｜invoke name="get_time">\n'
                      '<｜DSML｜parameter name="city" string="true">Tokyo</｜DSML｜parameter>\n'
                      "</｜DSML｜invoke>\n</｜DSML｜function_calls>\n"
                      '<｜DSML｜function_calls>\n<｜DSML｜invoke name="toggle">\n'
                      '<｜DSML｜parameter name="enabled" string="false">true</｜DSML｜parameter>\n'
                      '<｜DSML｜parameter name="x" string="false">null</｜DSML｜parameter>\n'
                      "</｜DSML｜invoke>\n</｜DSML｜function_calls>"),
])
def test_the_familys_own_text(name, text):
    calls = [("get_time", {"city": "Tokyo"}), ("toggle", {"enabled": True, "x": None})]
    assert spell_calls(SYNTAXES[name], calls) == text
