"""A GenerateContentRequest as the neutral request: contents as messages (function
calls paired with their responses by id, else by name in order), the system
instruction, function declarations (`parameters` converted from Gemini's Schema,
`parametersJsonSchema` as sent), the calling modes, generationConfig, and each
refusal naming its field."""

from __future__ import annotations

from typing import Any

import pytest

from parlance.core.errors import InvalidRequest, NotImplementedHere
from parlance.core.tools import ReasoningEffort, ToolChoice
from parlance.dialects.base import Incoming
from parlance.dialects.gemini import CountTokens, GenerateContent
from parlance.dialects.gemini.embed import BatchEmbedContents, EmbedContent
from parlance.dialects.gemini.schema import json_schema
from parlance.dialects.shared.wire import LIST_SLICE

USER = {"role": "user", "parts": [{"text": "Weather in Paris?"}]}
WEATHER = {"name": "get_weather", "description": "Weather for a city",
           "parametersJsonSchema": {"type": "object",
                                    "properties": {"city": {"type": "string"}},
                                    "required": ["city"]}}
TIME = {"name": "get_time", "parameters": {"type": "OBJECT", "properties": {}}}


def parse(body: dict[str, Any], model: str = "models/fake-model", **query: str):
    return GenerateContent().parse(Incoming({"contents": [USER], **body}, {"model": model},
                                            query)).request


def refusal(body: dict[str, Any]) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        parse(body)
    return caught.value


def test_the_model_comes_from_the_url_with_or_without_its_models_prefix():
    assert parse({}).model == "fake-model"
    assert parse({}, model="fake-model").model == "fake-model"


def test_contents_become_messages_and_snake_case_is_read_too():
    request = parse({"system_instruction": {"parts": [{"text": "Be brief."}]},
                     "contents": [USER, {"role": "model", "parts": [{"text": "Sunny."}]},
                                  {"parts": [{"text": "Thanks"}, {"text": "!"}]}]})
    messages = request.prompts[0].messages
    assert [(m.role, m.content) for m in messages] == [
        ("system", "Be brief."), ("user", "Weather in Paris?"), ("assistant", "Sunny."),
        ("user", "Thanks\n!")]
    assert not request.continue_final


def test_calls_without_ids_pair_with_responses_by_name_in_order():
    calls = {"role": "model", "parts": [
        {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
        {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}]}
    answers = {"role": "user", "parts": [
        {"functionResponse": {"name": "get_weather", "response": {"output": "Sunny"}}},
        {"functionResponse": {"name": "get_weather", "response": {"temp": 3}}}]}
    messages = parse({"contents": [USER, calls, answers]}).prompts[0].messages
    made = messages[1].tool_calls
    assert [c.arguments for c in made] == ['{"city": "Paris"}', '{"city": "Oslo"}']
    assert made[0].id != made[1].id
    assert [(m.role, m.content, m.tool_call_id) for m in messages[2:]] == [
        ("tool", "Sunny", made[0].id), ("tool", '{"temp": 3}', made[1].id)]
    again = parse({"contents": [USER, calls, answers]}).prompts[0].messages
    assert again[1].tool_calls == made  # the same ids each turn: the prompt stays the same


def test_thought_parts_are_the_turns_reasoning_and_foreign_signatures_are_ignored():
    turn = {"role": "model", "parts": [
        {"text": "Let me think.", "thought": True},
        {"functionCall": {"name": "get_weather", "args": {}},
         "thoughtSignature": "skip_thought_signature_validator"}]}
    messages = parse({"contents": [USER, turn]}).prompts[0].messages
    assert messages[1].reasoning == "Let me think."


def test_tools_and_gemini_schemas_become_json_schema():
    request = parse({"tools": [{"functionDeclarations": [WEATHER, TIME]},
                               {"googleSearch": {}}]})
    assert [t.name for t in request.tools] == ["get_weather", "get_time"]
    assert request.tools[0].parameters == WEATHER["parametersJsonSchema"]
    assert request.tools[1].parameters == {"type": "object", "properties": {}}
    assert request.tool_choice == ToolChoice("auto")
    converted = json_schema({
        "type": "OBJECT", "propertyOrdering": ["b", "a"], "required": ["a"],
        "properties": {"a": {"type": "STRING", "nullable": True, "enum": ["x"]},
                       "b": {"type": "ARRAY", "items": {"type": "INTEGER"},
                             "minItems": "1", "example": [1]}}}, "p")
    assert converted == {"type": "object", "required": ["a"], "properties": {
        "b": {"type": "array", "items": {"type": "integer"}, "minItems": 1},
        "a": {"type": ["string", "null"], "enum": ["x", None]}}}
    assert list(converted["properties"]) == ["b", "a"]


@pytest.mark.parametrize(("config", "choice", "offered"), [
    ({"mode": "ANY"}, ToolChoice("required"), ["get_weather", "get_time"]),
    ({"mode": "ANY", "allowedFunctionNames": ["get_time"]}, ToolChoice("named", "get_time"),
     ["get_time"]),
    ({"mode": "VALIDATED", "allowedFunctionNames": ["get_weather"]}, ToolChoice("auto"),
     ["get_weather"]),
    ({"mode": "NONE"}, ToolChoice("none"), ["get_weather", "get_time"]),
    ({"mode": "AUTO"}, ToolChoice("auto"), ["get_weather", "get_time"]),
])
def test_function_calling_modes(config, choice, offered):
    request = parse({"tools": [{"functionDeclarations": [WEATHER, TIME]}],
                     "toolConfig": {"functionCallingConfig": config}})
    assert request.tool_choice == choice
    assert [t.name for t in request.tools] == offered


def test_calling_refusals_name_their_field():
    tools = [{"functionDeclarations": [WEATHER]}]
    config = "toolConfig.functionCallingConfig"
    assert refusal({"tools": tools, "toolConfig": {"functionCallingConfig": {
        "mode": "ANY", "allowedFunctionNames": ["nope"]}}}).param == (
        f"{config}.allowedFunctionNames[0]")
    assert refusal({"toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}).param == (
        f"{config}.mode")
    assert refusal({"tools": [{"functionDeclarations": [WEATHER, WEATHER]}]}).param == (
        "tools[0].functionDeclarations[1].name")
    assert refusal({"tools": [{"functionDeclarations": [{"name": "f", "parameters": {
        "type": "WIDGET"}}]}]}).param == "tools[0].functionDeclarations[0].parameters.type"


def test_generation_config():
    request = parse({"generationConfig": {
        "temperature": 0.2, "topP": 0.9, "topK": 40.0, "candidateCount": 2,
        "maxOutputTokens": 64, "stopSequences": ["END", ""], "seed": 7,
        "presencePenalty": 0.5, "frequencyPenalty": 0.25, "responseLogprobs": True,
        "logprobs": 3}, "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT",
                                            "threshold": "BLOCK_NONE"}]})
    s = request.sampling
    assert (s.temperature, s.top_p, s.top_k, s.seed) == (0.2, 0.9, 40, 7)
    assert (s.presence_penalty, s.frequency_penalty) == (0.5, 0.25)
    assert request.sampling_set == {"temperature", "top_p", "top_k", "seed",
                                    "presence_penalty", "frequency_penalty"}
    assert (request.n, request.max_tokens, request.stop, request.logprobs) == (
        2, 64, ("END",), 3)


def test_structured_output():
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    fmt = parse({"generationConfig": {"responseMimeType": "application/json",
                                      "responseJsonSchema": schema}}).response_format
    assert fmt is not None and fmt.schema == schema and fmt.kind == "json_schema"
    fmt = parse({"generationConfig": {"responseMimeType": "application/json",
                                      "responseSchema": {"type": "OBJECT"}}}).response_format
    assert fmt is not None and fmt.schema == {"type": "object"}
    fmt = parse({"generationConfig": {"responseMimeType": "application/json"}}).response_format
    assert fmt is not None and fmt.kind == "json_object"
    assert refusal({"generationConfig": {"responseSchema": {"type": "OBJECT"}}}).param == (
        "generationConfig.responseMimeType")
    with pytest.raises(NotImplementedHere):
        parse({"generationConfig": {"responseMimeType": "text/x.enum"}})


@pytest.mark.parametrize(("thinking", "effort", "budget"), [
    ({"thinkingBudget": 0}, ReasoningEffort.NONE, None),
    ({"thinkingBudget": -1}, ReasoningEffort.ON, None),
    ({"includeThoughts": True, "thinkingBudget": 8192}, ReasoningEffort.ON, 8192),
    ({"thinkingLevel": "LOW"}, ReasoningEffort.LOW, None),
    ({"includeThoughts": True, "thinkingLevel": "HIGH"}, ReasoningEffort.HIGH, None),
])
def test_thinking_config_is_a_preference(thinking, effort, budget):
    reasoning = parse({"generationConfig": {"thinkingConfig": thinking}}).reasoning
    assert reasoning is not None and reasoning.best_effort
    assert (reasoning.effort, reasoning.budget_tokens) == (effort, budget)


def test_what_cannot_be_honoured_is_refused_by_name():
    assert refusal({"contents": []}).param == "contents"
    assert refusal({"contents": [{"role": "system", "parts": [{"text": "x"}]}]}).param == (
        "contents[0].role")
    assert refusal({"contents": [{"role": "user", "parts": [{"inlineData": {
        "mimeType": "image/png", "data": "AAAA"}}]}]}).param == "contents[0].parts[0]"
    assert refusal({"generationConfig": {"temperature": 3}}).param == (
        "generationConfig.temperature")
    with pytest.raises(NotImplementedHere):
        parse({"cachedContent": "cachedContents/abc"})


def test_the_stream_switch_is_in_the_url():
    streaming = GenerateContent(streaming=True)
    sse = streaming.parse(Incoming({"contents": [USER]}, {"model": "m"}, {"alt": "sse"}))
    array = streaming.parse(Incoming({"contents": [USER]}, {"model": "m"}))
    whole = GenerateContent().parse(Incoming({"contents": [USER]}, {"model": "m"}))
    assert (sse.stream, sse.framing) == (True, None)
    assert (array.stream, array.framing) == (True, "json")
    assert not whole.stream


def test_count_tokens_takes_contents_or_a_whole_request():
    count = CountTokens()
    plain = count.parse(Incoming({"contents": [USER]}, {"model": "models/m"}))
    assert plain.request.model == "m" and len(plain.request.prompts[0].messages) == 1
    whole = count.parse(Incoming({"generateContentRequest": {
        "model": "models/m", "contents": [USER],
        "systemInstruction": {"parts": [{"text": "Hi"}]},
        "tools": [{"functionDeclarations": [WEATHER]}]}}, {"model": "m"}))
    assert [t.name for t in whole.request.tools] == ["get_weather"]
    assert count.render_count(7)["totalTokens"] == 7


def test_count_tokens_of_more_contents_than_one_validation_slice():
    """Past LIST_SLICE items the wire model validates in slices and returns a copy;
    counting must not validate the contents a second time through `__init__` (a
    warning there, an error under this suite's filter, was a 500)."""
    model = {"role": "model", "parts": [{"text": "Sunny."}]}
    many = [USER, model] * (LIST_SLICE // 2) + [USER]
    counted = CountTokens().parse(Incoming({"contents": many}, {"model": "models/m"}))
    assert len(counted.request.prompts[0].messages) == len(many) > LIST_SLICE


def test_embeddings_one_or_a_batch():
    one = EmbedContent().parse(Incoming({"content": {"parts": [{"text": "a"}, {"text": "b"}]},
                                         "outputDimensionality": 8}, {"model": "models/e"}))
    assert one.request.model == "e" and one.request.inputs[0].text == "a\nb"
    assert one.dimensions == (8,) and one.request.truncate
    batch = BatchEmbedContents().parse(Incoming({"requests": [
        {"model": "models/e", "content": {"parts": [{"text": "x"}]}},
        {"model": "models/e", "content": {"parts": [{"text": "y"}]},
         "taskType": "RETRIEVAL_QUERY"}]},
        {"model": "e"}))
    assert [i.text for i in batch.request.inputs] == ["x", "y"]
    with pytest.raises(InvalidRequest) as caught:
        BatchEmbedContents().parse(Incoming({"requests": [
            {"model": "models/other", "content": {"parts": [{"text": "x"}]}}]}, {"model": "e"}))
    assert caught.value.param == "requests[0].model"
