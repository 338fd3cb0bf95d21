"""Chat Completions tool calls, reasoning and structured-output parameters, driven
through the app with the fake engine (raw `Generated` text goes through the same
output parser as the real engine's)."""

from __future__ import annotations

import json

import httpx
import pytest

from parlance.core.events import Finish, FinishReason, Usage
from parlance.engines.fake import FakeEngine, Generated
from parlance.engines.parsing.syntax import HERMES, LLAMA3_JSON, MISTRAL
from tests.support.fake_app import make_app
from tests.support.sse import sse_data

CHAT = "/v1/chat/completions"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
ASK = {"model": "fake-model", "messages": [{"role": "user", "content": "Weather in Paris?"}],
       "tools": [WEATHER]}
CALL_TEXT = ['<tool', '_call>\n{"name": "get_', 'weather", "argu', 'ments": {"ci',
             'ty": "Par', 'is"}}\n</tool_call>']


def _script(*texts: str, usage: Usage | None = None):
    return [*(Generated(t) for t in texts), Finish(FinishReason.STOP),
            usage or Usage(9, len(texts))]


async def test_streamed_tool_call_deltas(client, fake_engine):
    fake_engine.enqueue(*_script(*CALL_TEXT))
    frames = sse_data((await client.post(CHAT, json={**ASK, "stream": True})).text)
    assert frames[-1] == "[DONE]"
    deltas = [f["choices"][0]["delta"] for f in frames[:-1]]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    first, rest = calls[0], calls[1:]
    assert first["index"] == 0 and first["id"].startswith("call_")
    assert first["type"] == "function"
    assert first["function"] == {"name": "get_weather", "arguments": ""}
    assert rest and all(set(c) == {"index", "function"} and set(c["function"]) == {"arguments"}
                        for c in rest)
    assert json.loads("".join(c["function"]["arguments"] for c in rest)) == {"city": "Paris"}
    assert not any(d.get("content") for d in deltas)
    assert frames[-2]["choices"][0]["finish_reason"] == "tool_calls"


async def test_non_stream_tool_calls_message(client, fake_engine):
    fake_engine.enqueue(*_script("Checking. ", *CALL_TEXT))
    body = (await client.post(CHAT, json=ASK)).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == "Checking. "
    [call] = message["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


async def test_only_calls_means_null_content(client, fake_engine):
    fake_engine.enqueue(*_script(*CALL_TEXT))
    message = (await client.post(CHAT, json=ASK)).json()["choices"][0]["message"]
    assert message["content"] is None


async def test_tool_call_syntax_without_tools_is_plain_content(client, fake_engine):
    fake_engine.enqueue(*_script(*CALL_TEXT))
    body = (await client.post(CHAT, json={**ASK, "tools": None})).json()
    assert body["choices"][0]["message"]["content"] == "".join(CALL_TEXT)
    assert body["choices"][0]["finish_reason"] == "stop"


async def test_tool_choice_none_keeps_tools_from_the_model(client, fake_engine):
    await client.post(CHAT, json={**ASK, "tool_choice": "none"})
    request = fake_engine.requests[-1]
    assert request.tools and request.callable_tools == ()


async def test_tool_parameters_reach_the_core_request(client, fake_engine):
    await client.post(CHAT, json={
        **ASK, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": False, "reasoning_effort": "none",
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "out", "strict": True, "schema": {"type": "object"}}}})
    request = fake_engine.requests[-1]
    assert request.tool_choice.mode == "named" and request.tool_choice.name == "get_weather"
    assert request.tools[0].parameters == WEATHER["function"]["parameters"]
    assert request.tools[0].param == "tools[0].function.parameters"
    assert not request.parallel_tool_calls
    assert request.response_format.kind == "json_schema" and request.response_format.strict
    assert request.reasoning.effort.value == "none"


async def test_reasoning_streams_as_reasoning_content(client, fake_engine):
    fake_engine.enqueue(*_script("<thi", "nk>Hmm, a greeting", ".</th", "ink>\n\nHello!",
                                 usage=Usage(5, 8, reasoning_tokens=5)))
    frames = sse_data((await client.post(CHAT, json={
        "model": "fake-model", "messages": [{"role": "user", "content": "Hi"}], "stream": True,
        "stream_options": {"include_usage": True}})).text)
    deltas = [f["choices"][0]["delta"] for f in frames[:-1] if f["choices"]]
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    assert (reasoning, content) == ("Hmm, a greeting.", "Hello!")
    usage = frames[-2]["usage"]
    assert usage["completion_tokens_details"] == {"reasoning_tokens": 5}


async def test_reasoning_non_stream_message(client, fake_engine):
    fake_engine.enqueue(*_script("<think>Short.</think>Hi!"))
    message = (await client.post(CHAT, json={
        "model": "fake-model", "messages": [{"role": "user", "content": "Hi"}]})).json()[
        "choices"][0]["message"]
    assert message["reasoning_content"] == "Short." and message["content"] == "Hi!"


async def test_tool_turns_parse_into_core_messages(client, fake_engine):
    await client.post(CHAT, json={**ASK, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C, sunny"}]})
    messages = fake_engine.requests[-1].prompts[0].messages
    assert messages[1].tool_calls[0].arguments == '{"city": "Paris"}'
    assert messages[2].role == "tool" and messages[2].tool_call_id == "call_1"


@pytest.mark.parametrize(("syntax", "pieces"), [
    (HERMES, ['<tool_', 'call>{"name": "get_weather", "arguments": {"city": "Pa', 'ris"}}</tool',
              '_call>']),
    (MISTRAL, ['[TOOL_', 'CALLS][{"name": "get_weather", "arguments": {"city": "Pa', 'ris"}}]']),
    (MISTRAL, ['[TOOL_CALLS]get_', 'weather[AR', 'GS]{"city": "Paris"}']),
    (LLAMA3_JSON, [' {"name": "get_weather", "param', 'eters": {"city": "Paris"}}']),
    (LLAMA3_JSON, ['<|python_', 'tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}']),
])
async def test_every_call_syntax_streams_the_same_chat_deltas(syntax, pieces):
    engine = FakeEngine(tool_syntax=syntax)
    engine.enqueue(*_script(*pieces))
    transport = httpx.ASGITransport(app=make_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        frames = sse_data((await client.post(CHAT, json={**ASK, "stream": True})).text)
    calls = [f["choices"][0]["delta"]["tool_calls"][0] for f in frames[:-1]
             if "tool_calls" in f["choices"][0]["delta"]]
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    assert json.loads("".join(c["function"]["arguments"] for c in calls[1:])) == {
        "city": "Paris"}
    assert not any(f["choices"][0]["delta"].get("content") for f in frames[:-1])
    assert frames[-2]["choices"][0]["finish_reason"] == "tool_calls"


async def test_unterminated_call_at_length_keeps_finish_reason_length(client, fake_engine):
    fake_engine.enqueue(Generated('<tool_call>{"name": "get_weather", "arguments": {"ci'),
                        Finish(FinishReason.LENGTH), Usage(9, 20))
    body = (await client.post(CHAT, json=ASK)).json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["tool_calls"][0]["function"]["arguments"] == '{"ci'
