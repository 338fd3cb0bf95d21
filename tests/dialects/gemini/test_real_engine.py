"""Gemini's API on the REAL engine (SmolLM2): an agent's next turn (the model's function
call and its response appended, as Gemini CLI sends it, thought signature and all)
reads the earlier turn's prompt from the prompt cache (`cachedContentTokenCount`),
because the turn renders the same each time (call ids made from their place); a forced
call's arguments and a response schema are grammar-guaranteed."""

from __future__ import annotations

import json

import pytest

from tests.support.real_engine import MODEL_ID, asgi_client, make_app

pytestmark = pytest.mark.model

PATH = f"/v1beta/models/{MODEL_ID}:generateContent"
SYSTEM = {"parts": [{"text": "You are a helpful assistant. Use the tools you are given. " * 8}]}
ASKED = {"role": "user", "parts": [{"text": "What is the weather in Paris?"}]}
TOOLS = [{"functionDeclarations": [{"name": "get_weather", "description": "Weather in a city",
                                    "parametersJsonSchema": {
                                        "type": "object", "required": ["city"],
                                        "properties": {"city": {"type": "string"}}}}]}]
FORCED = {"functionCallingConfig": {"mode": "ANY"}}
GREEDY = {"temperature": 0, "maxOutputTokens": 64}


async def test_the_next_turn_reads_its_prompt_from_the_cache(llama):
    async with asgi_client(make_app(llama)) as http:
        first = (await http.post(PATH, json={
            "systemInstruction": SYSTEM, "contents": [ASKED], "tools": TOOLS,
            "toolConfig": FORCED, "generationConfig": GREEDY})).json()
        turn = first["candidates"][0]["content"]
        call = turn["parts"][-1]["functionCall"]
        assert call["name"] == "get_weather" and set(call["args"]) == {"city"}
        answer = {"role": "user", "parts": [{"functionResponse": {
            "id": call["id"], "name": "get_weather", "response": {"output": "Sunny, 21 C"}}}]}
        second = (await http.post(PATH, json={
            "systemInstruction": SYSTEM, "contents": [ASKED, turn, answer], "tools": TOOLS,
            "generationConfig": GREEDY})).json()
    usage = second["usageMetadata"]
    assert usage["promptTokenCount"] > first["usageMetadata"]["promptTokenCount"]
    assert usage["cachedContentTokenCount"] >= first["usageMetadata"]["promptTokenCount"] // 2


async def test_a_response_schema_is_grammar_guaranteed(llama):
    schema = {"type": "OBJECT", "required": ["name", "age"],
              "properties": {"name": {"type": "STRING"}, "age": {"type": "INTEGER"}}}
    async with asgi_client(make_app(llama)) as http:
        answer = (await http.post(PATH, json={
            "contents": [{"parts": [{"text": "Invent a person."}]}],
            "generationConfig": {"temperature": 0, "maxOutputTokens": 48,
                                 "responseMimeType": "application/json",
                                 "responseSchema": schema}})).json()
    text = answer["candidates"][0]["content"]["parts"][0]["text"]
    if answer["candidates"][0]["finishReason"] == "STOP":  # (a cut-off answer is no JSON)
        person = json.loads(text)
        assert set(person) == {"name", "age"} and isinstance(person["age"], int)
