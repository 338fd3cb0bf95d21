"""Tool calling on the REAL engine (SmolLM2-135M, greedy) through the official
openai SDK with strict validation. SmolLM2's template knows no tools, so they
reach it through Parlance's built-in Hermes prompt; forced calls are
grammar-constrained, so their arguments always validate, even on a 135M model."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest

from tests.support.real_engine import MODEL_ID, asgi_client, make_app, no_eog_bias

pytestmark = pytest.mark.model

WEATHER_PARAMS = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 40},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}
BOOKING_PARAMS = {"type": "object", "properties": {
    "guests": {"type": "integer", "minimum": 1, "maximum": 8},
    "date": {"type": "string", "format": "date"},
    "room": {"type": "object", "properties": {
        "kind": {"enum": ["single", "double", "suite"]},
        "smoking": {"type": "boolean"}}, "required": ["kind"]},
    "extras": {"type": "array", "items": {"enum": ["breakfast", "parking", "spa"]},
               "maxItems": 3}}, "required": ["guests", "date", "room"]}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather",
                                      "description": "Current weather in a city",
                                      "parameters": WEATHER_PARAMS}},
    {"type": "function", "function": {"name": "book_hotel", "description": "Book a hotel room",
                                      "parameters": BOOKING_PARAMS}},
]
PARAMS = {"get_weather": WEATHER_PARAMS, "book_hotel": BOOKING_PARAMS}


@pytest.fixture
def sdk(llama):
    return openai.AsyncOpenAI(base_url="http://parlance.test/v1", api_key="unused",
                              http_client=asgi_client(make_app(llama)),
                              _strict_response_validation=True, max_retries=0)


def ask(content: str) -> list[dict]:
    return [{"role": "user", "content": content}]


def assert_valid(calls) -> None:
    assert calls
    for call in calls:
        jsonschema.validate(json.loads(call.function.arguments), PARAMS[call.function.name],
                            format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)


async def test_required_call_validates_and_round_trips_through_a_tool_reply(sdk, llama):
    async with sdk:
        messages = ask("What's the weather in Paris?")
        first = await sdk.chat.completions.create(
            model=MODEL_ID, messages=messages, tools=TOOLS, tool_choice="required",
            parallel_tool_calls=False, temperature=0, max_tokens=120)
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        [call] = choice.message.tool_calls
        assert_valid([call])
        messages += [choice.message.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"}]
        second = await sdk.chat.completions.create(
            model=MODEL_ID, messages=messages, tools=TOOLS, temperature=0, max_tokens=60,
            logit_bias=no_eog_bias(llama))
    answer = second.choices[0]
    # free to answer or to call again: prose runs to max_tokens, a call is valid
    if answer.message.tool_calls:
        assert answer.finish_reason == "tool_calls"
        assert_valid(answer.message.tool_calls)
    else:
        assert answer.finish_reason == "length" and answer.message.content
    # the call and the tool's reply were rendered into the second prompt
    assert second.usage.prompt_tokens > first.usage.prompt_tokens + 20


async def test_named_tool_with_a_nested_schema(sdk):
    async with sdk:
        reply = await sdk.chat.completions.create(
            model=MODEL_ID, messages=ask("Book a double room for two on 2026-12-24."),
            tools=TOOLS, tool_choice={"type": "function", "function": {"name": "book_hotel"}},
            temperature=0, max_tokens=200)
    calls = reply.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["book_hotel"]
    assert_valid(calls)


async def test_parallel_tool_calls_are_whole_distinct_and_valid(sdk):
    """How many calls the model writes is its choice; each is whole and valid, with an id
    of its own, and none repeats another."""
    async with sdk:
        reply = await sdk.chat.completions.create(
            model=MODEL_ID, messages=ask("What's the weather in Paris and in London?"),
            tools=TOOLS[:1], tool_choice="required", temperature=0, max_tokens=200)
    calls = reply.choices[0].message.tool_calls
    assert calls and len({c.id for c in calls}) == len(calls)
    assert_valid(calls)
    arguments = [json.loads(c.function.arguments) for c in calls]
    assert len(set(map(json.dumps, arguments))) == len(arguments)


async def test_streamed_calls_accumulate_to_the_non_streamed_ones(sdk):
    kwargs = dict(model=MODEL_ID, messages=ask("What's the weather in Paris and in London?"),
                  tools=TOOLS[:1], tool_choice="required", temperature=0, max_tokens=200)
    async with sdk:
        plain = await sdk.chat.completions.create(**kwargs)
        async with sdk.chat.completions.stream(**kwargs) as stream:
            streamed = await stream.get_final_completion()
    def calls(reply):
        return [(c.function.name, c.function.arguments)
                for c in reply.choices[0].message.tool_calls]
    assert calls(streamed) == calls(plain)
    assert streamed.choices[0].finish_reason == plain.choices[0].finish_reason
    assert plain.choices[0].finish_reason in ("tool_calls", "length")


async def test_auto_calls_are_constrained_once_the_model_opens_one(sdk, llama):
    # SmolLM2 answers in prose by itself; a small bias towards "<" makes it open
    # <tool_call> blocks, and from the marker on the region grammar keeps the
    # arguments valid (an unconstrained 135M model would not). The budget fits the
    # longest arguments either schema allows, whichever call the model opens; a call
    # max_tokens cuts (the model may go on to another) is cut, as OpenAI's is.
    [less_than] = llama.model.tokenize("<", add_special=False, parse_special=False)
    async with sdk:
        reply = await sdk.chat.completions.create(
            model=MODEL_ID, messages=ask("What's the weather in Paris?"), tools=TOOLS,
            logit_bias={str(less_than): 5}, temperature=0, max_tokens=200)
    calls = reply.choices[0].message.tool_calls or []
    assert_valid(calls[:-1] if reply.choices[0].finish_reason == "length" else calls)


async def test_tool_choice_none_and_reasoning_effort_on_a_model_that_cannot_reason(sdk):
    async with sdk:
        reply = await sdk.chat.completions.create(
            model=MODEL_ID, messages=ask("What's the weather in Paris?"), tools=TOOLS,
            tool_choice="none", reasoning_effort="none", temperature=0, max_tokens=20)
        assert reply.choices[0].message.tool_calls is None
        with pytest.raises(openai.BadRequestError) as caught:
            await sdk.chat.completions.create(
                model=MODEL_ID, messages=ask("Hi"), reasoning_effort="high")
    assert caught.value.body["param"] == "reasoning_effort"
    assert "does not reason" in caught.value.body["message"]


# -- the cap cutting a repeated forced call -----------------------------

LOCATION_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
                   "required": ["location"]}}}


@pytest.mark.parametrize("max_tokens", [48, 160])
async def test_required_calls_never_leak_markup_nor_repeat(llama, max_tokens):
    """The issue's case: `required` with parallel calls left on; the 135M model writes the
    same call again and again. A repeat is dropped and ends the answer, or the cap cuts
    it: either way only whole calls, and no `<tool_call>` markup in any content, streamed
    or not, Chat or Responses."""
    chat = {"model": MODEL_ID, "messages": ask("What's the weather in Paris?"),
            "tools": [LOCATION_TOOL], "tool_choice": "required", "temperature": 0,
            "max_tokens": max_tokens}
    responses = {"model": MODEL_ID, "input": "What's the weather in Paris?",
                 "tools": [{"type": "function", **LOCATION_TOOL["function"]}],
                 "tool_choice": "required", "temperature": 0, "max_output_tokens": max_tokens}
    async with asgi_client(make_app(llama)) as http:
        body = (await http.post("/v1/chat/completions", json=chat)).json()
        streamed = (await http.post("/v1/chat/completions", json={**chat, "stream": True})).text
        answer = (await http.post("/v1/responses", json=responses)).json()
        streamed_answer = (await http.post("/v1/responses",
                                           json={**responses, "stream": True})).text
    choice = body["choices"][0]
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"]))
             for c in choice["message"]["tool_calls"]]
    assert calls and len(set(map(json.dumps, calls))) == len(calls)  # whole, none repeated
    assert choice["message"]["content"] is None
    assert choice["finish_reason"] in ("tool_calls", "length")
    if choice["finish_reason"] == "tool_calls":
        assert body["usage"]["completion_tokens"] < max_tokens  # stopped at the repeat
    for text in (streamed, streamed_answer, json.dumps(answer)):
        assert "<tool_call>" not in text and "tool_call>" not in text
    assert '"finish_reason":"' + choice["finish_reason"] + '"' in streamed
    items = [(i["type"], i.get("name"), json.loads(i["arguments"])) for i in answer["output"]]
    assert items == [("function_call", n, a) for n, a in calls]


HUGE_PATTERN = {"type": "object", "properties": {
    "code": {"type": "string", "pattern": "^a{1000000}$"}}, "required": ["code"]}
ASK = [{"role": "user", "content": "Call f."}]
TOO_LARGE = [  # (path, body, the parameter named) in every dialect with schemas
    ("/v1/chat/completions", {"model": MODEL_ID, "messages": ASK, "tool_choice": "required",
                              "tools": [{"type": "function", "function": {
                                  "name": "f", "parameters": HUGE_PATTERN}}]},
     "tools[0].function.parameters"),
    ("/v1/chat/completions", {"model": MODEL_ID, "messages": ASK, "stream": True,
                              "response_format": {"type": "json_schema", "json_schema": {
                                  "name": "f", "schema": HUGE_PATTERN}}},
     "response_format.json_schema.schema"),
    ("/v1/responses", {"model": MODEL_ID, "input": "Call f.", "tool_choice": "required",
                       "tools": [{"type": "function", "name": "f",
                                  "parameters": HUGE_PATTERN}]}, "tools[0].parameters"),
    ("/v1/messages", {"model": MODEL_ID, "max_tokens": 16, "messages": ASK,
                      "tool_choice": {"type": "any"},
                      "tools": [{"name": "f", "input_schema": HUGE_PATTERN}]},
     "tools[0].input_schema"),
    ("/api/chat", {"model": MODEL_ID, "messages": ASK, "format": HUGE_PATTERN}, "format"),
    ("/api/chat", {"model": MODEL_ID, "messages": ASK, "tools": [
        {"type": "function", "function": {"name": "f", "parameters": HUGE_PATTERN}}]},
     "tools[0].function.parameters"),
]


@pytest.mark.parametrize(("path", "body", "param"), TOO_LARGE,
                         ids=[f"{p}:{n}" for (p, _, n) in TOO_LARGE])
async def test_a_schema_too_large_to_enforce_is_a_400_naming_it(llama, path, body, param):
    """Never a 200 with free text where the client asked for a call or a format."""
    async with asgi_client(make_app(llama)) as http:
        response = await http.post(path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    message = error if isinstance(error, str) else error["message"]
    assert param in message and "^a{1000000}$" in message
    if isinstance(error, dict) and "param" in error:
        assert error["param"] == param
