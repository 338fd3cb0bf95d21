"""A schema's grammar either holds or the request fails naming the client's parameter:
a `pattern` llguidance compiles but cannot run on the model's vocabulary is refused in
`start()`, and a grammar that breaks mid-answer anyway ends the request with that
refusal instead of going on unconstrained."""

from __future__ import annotations

import pytest

from parlance.core.errors import InvalidRequest
from parlance.core.events import Failed, ToolCallStart
from parlance.core.tools import ResponseFormat, ToolChoice, ToolSpec
from parlance.engines.llamacpp import engine as engine_module
from parlance.engines.llamacpp import plan
from parlance.engines.llamacpp.pattern_probe import pattern_problem, patterns
from tests.support.real_engine import chat_request, run

HUGE = "^a{1000000}$"


def schema(pattern: str) -> dict:
    return {"type": "object", "properties": {"s": {"type": "string", "pattern": pattern}},
            "required": ["s"]}


def test_patterns_are_found_wherever_a_schema_holds_one():
    found = set(patterns({
        "type": "object",
        "properties": {"default": {"pattern": "p1"}, "pattern": {"type": "string"},
                       "list": {"items": {"anyOf": [{"pattern": "p2"}, {"type": "null"}]}}},
        "patternProperties": {"p3": {"pattern": "p4"}},
        "$defs": {"enum": {"pattern": "p5"}},
        "default": {"pattern": "not a schema"}, "const": {"pattern": "nor this"},
        "examples": [{"pattern": "nor these"}],
    }))
    assert found == {"p1", "p2", "p3", "p4", "p5"}


@pytest.mark.model
def test_a_pattern_too_large_for_the_grammar_engine_is_found(engine):
    assert "too many expressions" in pattern_problem(HUGE, engine.tokenizer)
    for fine in ("^a{1000}$", "^[a-z]+$", "^\\d{4}-\\d{2}-\\d{2}$", "[", ""):
        assert pattern_problem(fine, engine.tokenizer) is None, fine


@pytest.mark.model
@pytest.mark.parametrize("choice", ["required", "auto"])
async def test_a_tool_with_such_a_pattern_is_refused_in_start(engine, choice):
    tool = ToolSpec("f", parameters=schema(HUGE), param="tools[0].function.parameters")
    with pytest.raises(InvalidRequest) as info:
        await engine.start(chat_request("Call f.", tools=(tool,),
                                        tool_choice=ToolChoice(choice)))
    assert info.value.param == "tools[0].function.parameters"
    assert info.value.code == "invalid_schema" and "^a{1000000}$" in info.value.message


@pytest.mark.model
async def test_a_response_format_with_such_a_pattern_is_refused_in_start(engine):
    nested = {"type": "object", "properties": {"a": {"anyOf": [
        {"type": "integer"}, {"type": "string", "pattern": HUGE}]}}}
    fmt = ResponseFormat("json_schema", nested, param="text.format.schema")
    with pytest.raises(InvalidRequest) as info:
        await engine.start(chat_request("Answer.", response_format=fmt))
    assert info.value.param == "text.format.schema"


@pytest.mark.model
async def test_a_grammar_that_breaks_mid_answer_fails_the_request(engine, monkeypatch):
    """Past the check (as a limit no probe foresaw would be), the forced call's grammar
    breaks at the first token: the request fails naming the parameter, and nothing
    unconstrained follows."""
    monkeypatch.setattr(plan, "check_patterns", lambda request, tokenizer: None)
    # (the finished value's check cannot build such a pattern either: past it too)
    monkeypatch.setattr(engine_module.OutputCheck, "of", lambda request: None)
    tool = ToolSpec("f", parameters=schema(HUGE))
    result = await run(engine, chat_request("Call f.", tools=(tool,), max_tokens=16,
                                            tool_choice=ToolChoice("required")))
    failures = [e for e in result.events if isinstance(e, Failed)]
    assert len(failures) == 1 and isinstance(failures[0].error, InvalidRequest)
    assert failures[0].error.param == "tools" and failures[0].error.code == "invalid_schema"
    assert not [e for e in result.events if isinstance(e, ToolCallStart)]
