"""The finished value checked against the client's own schema (issue 39): each keyword
the grammar does not enforce fails the choice's end, structured output that is no JSON
fails it, output cut by `max_tokens` or a stop sequence does not, and a breach names
the keyword and the place, never the value."""

from __future__ import annotations

import json
from typing import Any

import pytest

from parlance.core.errors import InvalidRequest
from parlance.core.events import (
    Finish,
    FinishReason,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
)
from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest
from parlance.core.tools import ResponseFormat, ToolChoice, ToolSpec
from parlance.engines.output_check import OutputCheck

PROMPTS = (ChatInput((Message("user", "x"),)),)
# Keywords llguidance leaves out (lenient), each with a value that breaks it.
UNENFORCED: dict[str, tuple[dict[str, Any], Any, Any]] = {
    "uniqueItems": ({"type": "array", "items": {"enum": ["x", "y", "z"]}, "uniqueItems": True},
                    ["x", "y"], ["x", "x", "x"]),
    "propertyNames": ({"type": "object", "propertyNames": {"enum": ["a", "b"]}},
                      {"a": 1}, {"": 1}),
    "contains": ({"type": "array", "contains": {"const": 3}}, [1, 3], [1, 2]),
    "not": ({"not": {"type": "string"}}, 3, "s"),
    "if": ({"if": {"type": "string"}, "then": {"minLength": 2}}, "ab", "a"),
    "dependentRequired": ({"type": "object", "dependentRequired": {"a": ["b"]}},
                          {"a": 1, "b": 2}, {"a": 1}),
    "oneOf": ({"oneOf": [{"type": "number"}, {"type": "integer"}]}, 1.5, 2),
    "format": ({"type": "string", "format": "uri-reference"}, "/a/b", "\\ not one"),
}


def structured(schema: dict[str, Any]) -> OutputCheck:
    check = OutputCheck.of(GenerationRequest(
        model="m", prompts=PROMPTS,
        response_format=ResponseFormat("json_schema", schema, param="text.format.schema")))
    assert check is not None
    return check


def forced(schema: dict[str, Any]) -> OutputCheck:
    check = OutputCheck.of(GenerationRequest(
        model="m", prompts=PROMPTS, tool_choice=ToolChoice("required"),
        tools=(ToolSpec("submit", parameters={"type": "object", "properties": {"v": schema}},
                        param="tools[0].parameters"),)))
    assert check is not None
    return check


def answer(check: OutputCheck, text: str, reason: FinishReason = FinishReason.STOP,
           stop: str | None = None) -> InvalidRequest | None:
    breaches = [check.breach(TextDelta(piece)) for piece in (text[:3], text[3:])]
    breaches.append(check.breach(Finish(reason, stop_sequence=stop)))
    assert breaches[:2] == [None, None]  # only the end is judged
    return breaches[-1]


def call(check: OutputCheck, arguments: str) -> InvalidRequest | None:
    events = [ToolCallStart("c1", "submit"), ToolCallArgs(arguments[:2]),
              ToolCallArgs(arguments[2:]), ToolCallEnd(), Finish(FinishReason.TOOL_CALLS)]
    return [check.breach(e) for e in events][-1]


@pytest.mark.parametrize("keyword", list(UNENFORCED))
def test_each_unenforced_keyword_fails_structured_output_and_calls(keyword):
    schema, good, bad = UNENFORCED[keyword]
    assert answer(structured(schema), json.dumps(good)) is None
    breach = answer(structured(schema), json.dumps(bad))
    assert breach is not None and breach.code == "schema_unmet"
    assert breach.param == "text.format.schema" and keyword in breach.message
    assert call(forced(schema), json.dumps({"v": good})) is None
    breach = call(forced(schema), json.dumps({"v": bad}))
    assert breach is not None and breach.param == "tools[0].parameters"
    assert keyword in breach.message and "/v" in breach.message


def test_a_breach_never_quotes_the_value():
    schema = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    breach = answer(structured(schema), json.dumps(["secret", "secret"]))
    assert breach is not None and "secret" not in breach.message


def test_output_that_is_no_json_never_finishes_normally():
    """The probe: the model stopped after `{"x": ` with finish_reason stop."""
    breach = answer(structured({"type": "object"}), '{"x": ')
    assert breach is not None and "JSON" in breach.message
    assert call(forced({"type": "string"}), '{"v": ') is not None


def test_output_cut_on_purpose_is_no_breach():
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert answer(structured(schema), '{"a": "trunc', FinishReason.LENGTH) is None
    assert answer(structured(schema), '{"a": "x', stop="x") is None


def test_each_choice_is_judged_at_its_own_end():
    check = structured({"type": "array", "uniqueItems": True})
    assert check.breach(TextDelta("[1, 1]", index=1)) is None
    assert check.breach(TextDelta("[1, 2]", index=0)) is None
    assert check.breach(Finish(FinishReason.STOP, index=0)) is None
    assert check.breach(Finish(FinishReason.STOP, index=1)) is not None


def test_nothing_to_check_without_a_schema_and_freeform_tools_are_left_to_their_grammar():
    assert OutputCheck.of(GenerationRequest(model="m", prompts=PROMPTS)) is None
    assert OutputCheck.of(GenerationRequest(
        model="m", prompts=PROMPTS, tools=(ToolSpec("patch", freeform=True),))) is None


def test_a_schema_the_check_cannot_read_is_refused_naming_its_parameter():
    with pytest.raises(InvalidRequest) as caught:
        structured({"type": "string", "pattern": "(?=a)a"})
    assert caught.value.param == "text.format.schema"
    assert caught.value.code == "invalid_schema"


def test_a_format_nothing_enforces_is_refused_by_name():
    with pytest.raises(InvalidRequest) as caught:
        structured({"type": "string", "format": "credit-card"})
    assert "credit-card" in caught.value.message
