"""Grammars for freeform tools: the tool's Lark or regex grammar constrains its raw
input as a subgrammar, in every call syntax, and a grammar that cannot be enforced
is refused naming the client's parameter."""

from __future__ import annotations

import json

import llguidance
import pytest

from parlance.core.errors import InvalidRequest
from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest
from parlance.core.tools import InputGrammar, ToolSpec
from parlance.engines import grammar
from parlance.engines.parsing.syntax import HERMES, LLAMA3_JSON, MISTRAL
from tests.support.grammars import APPLY_PATCH_LARK

WEATHER = ToolSpec("get_weather", parameters={"type": "object",
                                              "properties": {"city": {"type": "string"}}})
PATCH = ToolSpec("apply_patch", freeform=True, grammar=InputGrammar("lark", APPLY_PATCH_LARK))
NOTE = ToolSpec("note", freeform=True)
PHONE = ToolSpec("phone", freeform=True, grammar=InputGrammar("regex", r"[0-9]{3}-[0-9]{4}"))


@pytest.mark.parametrize("syntax", [HERMES, MISTRAL, LLAMA3_JSON])
@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("tools", [(WEATHER, PATCH, NOTE, PHONE), (PATCH,), (NOTE,)])
def test_forced_and_region_grammars_with_freeform_tools_are_valid(syntax, parallel, tools):
    for source in (grammar.forced_calls_grammar(tools, syntax, parallel=parallel),
                   grammar.region_grammar(tools, syntax, parallel=parallel)):
        assert llguidance.LLMatcher.validate_grammar(source) == ""


def test_a_freeform_tools_grammar_is_its_own_subgrammar():
    source = grammar.forced_calls_grammar((WEATHER, PATCH, PHONE), HERMES, parallel=False)
    main, patch, phone = json.loads(source)["grammars"]
    assert '"\\n" @input_1 "\\n" "</tool_call>"' in main["lark_grammar"]
    assert patch == {"name": "input_1", "lark_grammar": APPLY_PATCH_LARK}  # kept apart
    assert phone["name"] == "input_2" and "[0-9]{3}-[0-9]{4}" in phone["lark_grammar"]


@pytest.mark.parametrize(("tool", "param"), [
    (ToolSpec("p", freeform=True, grammar=InputGrammar("lark", "start: missing_rule"),
              param="tools[2].format.definition"), "tools[2].format.definition"),
    (ToolSpec("p", freeform=True, grammar=InputGrammar("regex", "[a-"),
              param="tools[0].format.definition"), "tools[0].format.definition"),
])
def test_a_grammar_that_cannot_be_enforced_is_refused(tool, param):
    request = GenerationRequest(model="m", prompts=(ChatInput((Message("user", "x"),)),),
                                tools=(tool,))
    with pytest.raises(InvalidRequest) as caught:
        grammar.check_schemas(request)
    assert caught.value.param == param and caught.value.code == "invalid_grammar"


def test_freeform_tools_have_no_schema_to_check():
    request = GenerationRequest(model="m", prompts=(ChatInput((Message("user", "x"),)),),
                                tools=(PATCH, NOTE))
    grammar.check_schemas(request)  # no error
