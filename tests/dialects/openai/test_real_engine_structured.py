"""Structured output on the REAL engine (SmolLM2-135M, greedy), through the official
openai SDK with strict validation: whatever the small model would say, every
answer parses and validates against the client's JSON Schema, streamed or not. (Where
a schema leaves a value unbounded, a model may write it until `max_tokens` cuts it:
that answer is then the start of a JSON text, with `finish_reason` "length".)"""

from __future__ import annotations

import asyncio
import json

import jsonschema
import openai
import pytest

from tests.support.json_prefix import json_prefix
from tests.support.real_engine import MODEL_ID, asgi_client, make_app

pytestmark = pytest.mark.model

OBJ = "object"
SCHEMAS: list[tuple[str, dict]] = [
    ("Extract the person: John is 31 years old.",
     {"type": OBJ, "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
      "required": ["name", "age"]}),
    ("What colour is the sky?",
     {"type": OBJ, "properties": {"color": {"enum": ["red", "green", "blue"]}},
      "required": ["color"]}),
    ("Make a user profile for Ada Lovelace.",
     {"type": OBJ, "properties": {
         "user": {"type": OBJ, "properties": {"name": {"type": "string", "maxLength": 40},
                                              "email": {"type": "string", "maxLength": 40}},
                  "required": ["name", "email"]},
         "active": {"type": "boolean"}}, "required": ["user", "active"]}),
    ("List some fruits.",
     {"type": OBJ, "properties": {"fruits": {"type": "array", "items": {"type": "string",
                                                                        "maxLength": 20},
                                             "minItems": 2, "maxItems": 4}},
      "required": ["fruits"]}),
    ("What is the temperature in Oslo in winter, in Celsius?",
     {"type": OBJ, "properties": {"temperature": {"type": "number", "minimum": -50,
                                                  "maximum": 60}},
      "required": ["temperature"]}),
    ("Rate the movie Titanic.",
     {"type": OBJ, "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 10}},
      "required": ["score"]}),
    ("Give a title for a book about cats.",
     {"type": OBJ, "properties": {"title": {"type": "string", "maxLength": 60},
                                  "subtitle": {"type": "string", "maxLength": 60}},
      "required": ["title"]}),
    ("A shopping list for pancakes.",
     {"type": OBJ, "properties": {"items": {"type": "array", "maxItems": 3, "items": {
         "type": OBJ, "properties": {"name": {"type": "string", "maxLength": 20},
                                     "qty": {"type": "integer", "minimum": 1,
                                             "maximum": 12}},
         "required": ["name", "qty"]}}}, "required": ["items"]}),
    ("Is this email spam? 'You won a free cruise, click here!'",
     {"type": OBJ, "properties": {"is_spam": {"type": "boolean"},
                                  "reason": {"type": "string", "maxLength": 80}},
      "required": ["is_spam", "reason"]}),
    ("Report the API version.",
     {"type": OBJ, "properties": {"version": {"const": 2}, "ok": {"type": "boolean"}},
      "required": ["version", "ok"]}),
    ("How many legs does a spider have?",
     {"type": OBJ, "properties": {"value": {"anyOf": [{"type": "integer"},
                                                      {"type": "string", "maxLength": 20}]}},
      "required": ["value"]}),
    ("What is the middle name of Barack Obama?",
     {"type": OBJ, "properties": {"middle_name": {"type": ["string", "null"],
                                                  "maxLength": 30}},
      "required": ["middle_name"]}),
    ("What is the ZIP code of the White House?",
     {"type": OBJ, "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
      "required": ["zip"]}),
    ("When did the Apollo 11 land on the moon?",
     {"type": OBJ, "properties": {"date": {"type": "string", "format": "date"}},
      "required": ["date"]}),
    ("Nest some values.",
     {"type": OBJ, "properties": {"a": {"type": OBJ, "properties": {"b": {
         "type": OBJ, "properties": {"c": {"type": OBJ, "properties": {
             "d": {"type": "integer"}}, "required": ["d"]}}, "required": ["c"]}},
         "required": ["b"]}}, "required": ["a"]}),
    ("How many stars for this hotel?",
     {"type": OBJ, "properties": {"stars": {"enum": [1, 2, 3, 4, 5]}}, "required": ["stars"]}),
    ("Give humidity readings in percent.",
     {"type": OBJ, "properties": {"readings": {"type": "array", "minItems": 1, "maxItems": 5,
                                               "items": {"type": "number", "minimum": 0,
                                                         "maximum": 100}}},
      "required": ["readings"]}),
    ("Describe a line segment.",
     {"$defs": {"point": {"type": OBJ, "properties": {"x": {"type": "number"},
                                                     "y": {"type": "number"}},
                          "required": ["x", "y"]}},
      "type": OBJ, "properties": {"start": {"$ref": "#/$defs/point"},
                                  "end": {"$ref": "#/$defs/point"}},
      "required": ["start", "end"]}),
    ("Pick the primary colours.",
     {"type": "array", "items": {"enum": ["red", "yellow", "blue", "green"]},
      "minItems": 1, "maxItems": 3}),
    ("Summarise the plot of Hamlet.",
     {"type": OBJ, "properties": {"summary": {"type": "string", "maxLength": 40}},
      "required": ["summary"]}),
    ("Describe a shape.",
     {"type": OBJ, "properties": {"shape": {"oneOf": [
         {"type": OBJ, "properties": {"kind": {"const": "circle"},
                                      "radius": {"type": "number", "minimum": 0}},
          "required": ["kind", "radius"]},
         {"type": OBJ, "properties": {"kind": {"const": "square"},
                                      "side": {"type": "number", "minimum": 0}},
          "required": ["kind", "side"]}]}}, "required": ["shape"]}),
    ("A product record for a coffee mug.",
     {"type": OBJ, "properties": {
         "id": {"type": "integer", "minimum": 1}, "name": {"type": "string", "maxLength": 30},
         "price": {"type": "number", "exclusiveMinimum": 0},
         "tags": {"type": "array", "items": {"type": "string", "maxLength": 12},
                  "maxItems": 3},
         "in_stock": {"type": "boolean"}},
      "required": ["id", "name", "price", "tags", "in_stock"]}),
]


def response_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "strict": True,
                                                   "schema": schema}}


@pytest.fixture
def sdk(llama):
    return openai.AsyncOpenAI(base_url="http://parlance.test/v1", api_key="unused",
                              http_client=asgi_client(make_app(llama)),
                              _strict_response_validation=True, max_retries=0)


async def _answer(client: openai.AsyncOpenAI, prompt: str, schema: dict,
                  stream: bool) -> tuple[str, str]:
    """(the answer's text, its finish_reason)."""
    kwargs = dict(model=MODEL_ID, messages=[{"role": "user", "content": prompt}],
                  temperature=0, max_tokens=400, response_format=response_format(schema))
    if not stream:
        reply = await client.chat.completions.create(**kwargs)
        return reply.choices[0].message.content, reply.choices[0].finish_reason
    chunks = [c async for c in await client.chat.completions.create(**kwargs, stream=True)
              if c.choices]  # (a chunk without choices keeps an idle stream alive)
    return ("".join(c.choices[0].delta.content or "" for c in chunks),
            chunks[-1].choices[0].finish_reason)


def assert_follows(text: str, finish: str, schema: dict) -> None:
    """A complete answer validates; one cut by max_tokens is the start of a JSON text."""
    if finish == "length":
        assert json_prefix(text), text
        return
    assert finish == "stop", (finish, text)
    jsonschema.validate(json.loads(text), schema,
                        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


def test_there_are_more_than_twenty_varied_schemas():
    assert len(SCHEMAS) > 20
    for _, schema in SCHEMAS:
        jsonschema.Draft202012Validator.check_schema(schema)


async def test_every_schema_validates_streamed_and_not(sdk):
    async with sdk:
        jobs = [_answer(sdk, prompt, schema, stream)
                for prompt, schema in SCHEMAS for stream in (False, True)]
        answers = await asyncio.gather(*jobs)
    for i, (text, finish) in enumerate(answers):
        assert_follows(text, finish, SCHEMAS[i // 2][1])
    # greedy: the streamed answer is the non-streamed one
    assert answers[0::2] == answers[1::2]


async def test_json_object_mode_is_an_object(sdk):
    async with sdk:
        reply = await sdk.chat.completions.create(
            model=MODEL_ID, temperature=0, max_tokens=200,
            messages=[{"role": "user", "content": "Describe Paris as JSON with two keys."}],
            response_format={"type": "json_object"})
    text, finish = reply.choices[0].message.content, reply.choices[0].finish_reason
    assert text.lstrip().startswith("{")
    assert_follows(text, finish, {"type": "object"})


async def test_an_invalid_schema_is_a_400_naming_the_parameter(sdk):
    async with sdk:
        with pytest.raises(openai.BadRequestError) as caught:
            await sdk.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": "x"}],
                response_format=response_format({"type": "object", "properties": {
                    "a": {"type": "integr"}}}))
    assert caught.value.body["param"] == "response_format.json_schema.schema"


# -- issue 39: what the grammar cannot enforce is checked, a schema with no value refused --

# Each schema's grammar lets through exactly one value, which a keyword llguidance does not
# implement refuses: the finished value breaks the schema whatever the model writes.
UNENFORCED = {
    "uniqueItems": {"type": OBJ, "properties": {"xs": {
        "type": "array", "items": {"enum": ["x"]}, "minItems": 3, "maxItems": 3,
        "uniqueItems": True}}, "required": ["xs"]},
    "not": {"type": OBJ, "properties": {"m": {"enum": ["a"], "not": {"const": "a"}}},
            "required": ["m"]},
    "dependentRequired": {"type": OBJ, "properties": {"a": {"const": 1}},
                          "required": ["a"], "dependentRequired": {"a": ["b"]}},
}


@pytest.mark.parametrize("keyword", list(UNENFORCED))
async def test_a_value_breaking_an_unenforced_keyword_is_never_a_normal_finish(sdk, keyword):
    schema = UNENFORCED[keyword]
    async with sdk:
        with pytest.raises(openai.BadRequestError) as caught:
            await sdk.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": "Answer."}],
                temperature=0, max_tokens=100, response_format=response_format(schema))
        assert caught.value.body["code"] == "schema_unmet"
        assert keyword in caught.value.body["message"]
        chunks = []
        with pytest.raises(openai.APIError) as streamed:
            async for chunk in await sdk.chat.completions.create(
                    model=MODEL_ID, messages=[{"role": "user", "content": "Answer."}],
                    temperature=0, max_tokens=100, response_format=response_format(schema),
                    stream=True):
                chunks.append(chunk)
        assert keyword in str(streamed.value)
        assert not any(c.choices and c.choices[0].finish_reason for c in chunks)


async def test_a_forced_call_breaking_propertyNames_fails(sdk):
    """The probe's `submit({"m": {"": 1}})`: here the grammar allows only the key "c"."""
    params = {"type": OBJ, "properties": {"m": {
        "type": OBJ, "properties": {"c": {"const": 1}}, "required": ["c"],
        "propertyNames": {"enum": ["a", "b"]}}}, "required": ["m"]}
    tool = {"type": "function", "function": {"name": "submit", "parameters": params}}
    async with sdk:
        with pytest.raises(openai.BadRequestError) as caught:
            await sdk.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": "Submit."}],
                temperature=0, max_tokens=100, tools=[tool],
                tool_choice={"type": "function", "function": {"name": "submit"}})
    assert caught.value.body["code"] == "schema_unmet"
    assert caught.value.body["param"] == "tools[0].function.parameters"
    assert "propertyNames" in caught.value.body["message"]


@pytest.mark.parametrize("defs", [{"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}},
                                  {"A": {"$ref": "#/$defs/A"}}])
async def test_a_ref_loop_is_refused_before_any_output(sdk, defs):
    """It compiled, and the model stopped after `{"x": ` with finish_reason "stop"."""
    schema = {"$defs": defs, "type": OBJ, "properties": {"x": {"$ref": "#/$defs/A"}},
              "required": ["x"]}
    async with sdk:
        with pytest.raises(openai.BadRequestError) as caught:
            await sdk.chat.completions.create(
                model=MODEL_ID, messages=[{"role": "user", "content": "x"}],
                max_tokens=20, response_format=response_format(schema))
    assert caught.value.body["code"] == "invalid_schema"
    assert "$ref" in caught.value.body["message"]
