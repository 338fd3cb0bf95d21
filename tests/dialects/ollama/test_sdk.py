"""The official `ollama` Python client as oracle against the app over the fake engine:
chat and generate, streamed and not, a tools round trip (a Python function as the
tool), `format` with a JSON Schema, `think`, load/unload and errors."""

from __future__ import annotations

import httpx
import ollama
import pytest
from pydantic import BaseModel

from parlance.core.errors import EngineFailure
from parlance.core.events import Failed, Finish, FinishReason, TextDelta, Usage
from parlance.core.messages import Message, ToolCall
from parlance.core.tools import ReasoningEffort
from parlance.engines.fake import FakeEngine, Generated
from tests.support.fake_app import make_app

HELLO = [{"role": "user", "content": "Hello!"}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'


def sdk(engine: FakeEngine) -> ollama.AsyncClient:
    """The client on the app in process (its keyword arguments go to httpx)."""
    return ollama.AsyncClient(host="http://test",
                              transport=httpx.ASGITransport(app=make_app(engine)))


def answer(*texts: str, prompt: int = 5) -> list:
    return [*(TextDelta(t) for t in texts), Finish(FinishReason.STOP),
            Usage(prompt, len(texts), 0.01, 0.02)]


async def test_chat_non_stream():
    engine = FakeEngine()
    engine.enqueue(*answer("Hello", " world"))
    response = await sdk(engine).chat(model="fake-model", messages=HELLO)
    assert isinstance(response, ollama.ChatResponse)
    assert response.message.role == "assistant" and response.message.content == "Hello world"
    assert response.done and response.done_reason == "stop"
    assert (response.prompt_eval_count, response.eval_count) == (5, 2)
    assert (response.prompt_eval_duration, response.eval_duration) == (10_000_000, 20_000_000)
    assert response.total_duration and response.total_duration > 0
    assert response.created_at


async def test_chat_stream():
    engine = FakeEngine()
    engine.enqueue(*answer("Hello", " world"))
    parts = [part async for part in await sdk(engine).chat(model="fake-model", messages=HELLO,
                                                           stream=True)]
    assert "".join(p.message.content for p in parts) == "Hello world"
    assert [p.done for p in parts] == [False, False, True]
    assert parts[-1].done_reason == "stop" and parts[-1].eval_count == 2


async def test_generate_non_stream_and_stream():
    engine = FakeEngine()
    engine.enqueue(TextDelta("Blue"), TextDelta("."), Finish(FinishReason.STOP,
                                                             token_ids=(9, 8)), Usage(3, 2))
    engine.enqueue(*answer("Blue", "."))
    client = sdk(engine)
    whole = await client.generate(model="fake-model", prompt="Sky colour?", system="Brief.")
    assert isinstance(whole, ollama.GenerateResponse)
    assert whole.response == "Blue." and whole.done_reason == "stop"
    assert list(whole.context) == [0, 1, 2, 9, 8]  # the fake's prompt tokens, the answer's
    parts = [p async for p in await client.generate(model="fake-model", prompt="Sky?",
                                                     stream=True)]
    assert "".join(p.response for p in parts) == "Blue."
    assert parts[-1].done and not any(p.done for p in parts[:-1])


def get_weather(city: str) -> str:
    """Current weather in a city.

    Args:
        city: The city to get the weather for
    """
    return f"11 degrees in {city}"


async def test_tools_round_trip_with_a_python_function():
    engine = FakeEngine()
    engine.enqueue(Generated(CALL), Finish(FinishReason.STOP), Usage(9, 12))
    engine.enqueue(*answer("It is 11 degrees."))
    client = sdk(engine)
    messages: list = [{"role": "user", "content": "Weather in Paris?"}]
    first = await client.chat(model="fake-model", messages=messages, tools=[get_weather])
    spec = engine.requests[-1].tools[0]
    assert spec.name == "get_weather" and "city" in spec.parameters["properties"]
    calls = first.message.tool_calls
    assert calls and calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == {"city": "Paris"}
    messages.append(first.message)
    for call in calls:
        result = {"get_weather": get_weather}[call.function.name](**call.function.arguments)
        messages.append({"role": "tool", "content": result, "tool_name": call.function.name})
    final = await client.chat(model="fake-model", messages=messages, tools=[get_weather])
    assert final.message.content == "It is 11 degrees."
    seen = engine.requests[-1].prompts[0].messages
    call_id = seen[1].tool_calls[0].id
    assert seen[1:] == (
        Message("assistant", "", tool_calls=(ToolCall(call_id, "get_weather",
                                                      '{"city": "Paris"}'),)),
        Message("tool", "11 degrees in Paris", name="get_weather", tool_call_id=call_id))


async def test_streamed_tool_call_arrives_whole():
    engine = FakeEngine()
    engine.enqueue(Generated(CALL[:25]), Generated(CALL[25:]), Finish(FinishReason.STOP),
                   Usage(9, 12))
    parts = [p async for p in await sdk(engine).chat(
        model="fake-model", messages=HELLO, tools=[get_weather], stream=True)]
    calls = [c for p in parts for c in p.message.tool_calls or ()]
    assert len(calls) == 1 and calls[0].function.arguments == {"city": "Paris"}


class Person(BaseModel):
    name: str
    age: int


async def test_format_with_a_pydantic_schema():
    engine = FakeEngine()
    engine.enqueue(Generated('{"name": "Ollama", '), Generated('"age": 22}'),
                   Finish(FinishReason.STOP), Usage(9, 8))
    response = await sdk(engine).chat(model="fake-model", messages=HELLO,
                                      format=Person.model_json_schema())
    assert Person.model_validate_json(response.message.content) == Person(name="Ollama",
                                                                          age=22)
    fmt = engine.requests[-1].response_format
    assert fmt.kind == "json_schema" and fmt.schema == Person.model_json_schema()


@pytest.mark.parametrize(("think", "effort"), [(True, ReasoningEffort.ON),
                                               ("low", ReasoningEffort.LOW)])
async def test_think(think, effort):
    engine = FakeEngine()
    engine.enqueue(Generated("<think>Easy.</think>Four."), Finish(FinishReason.STOP),
                   Usage(5, 4))
    response = await sdk(engine).chat(model="fake-model", messages=HELLO, think=think)
    assert (response.message.thinking, response.message.content) == ("Easy.", "Four.")
    assert engine.requests[-1].reasoning.effort is effort


async def test_options_and_keep_alive_go_through():
    engine = FakeEngine()
    response = await sdk(engine).generate(
        model="fake-model", prompt="Hi", keep_alive="10m",
        options={"temperature": 0, "seed": 3, "num_predict": 1, "stop": ["!"]})
    request = engine.requests[-1]
    assert (request.sampling.temperature, request.sampling.seed, request.max_tokens,
            request.stop) == (0, 3, 1, ("!",))
    assert response.response == "Hello" and response.done_reason == "length"


async def test_load_then_unload():
    engine = FakeEngine()
    client = sdk(engine)
    loaded = await client.chat(model="fake-model", messages=[])
    assert loaded.done_reason == "load"
    unloaded = await client.generate(model="fake-model", keep_alive=0)
    assert unloaded.done_reason == "unload" and unloaded.response == ""


async def test_errors_raise_response_error_with_ollamas_status():
    engine = FakeEngine()
    client = sdk(engine)
    with pytest.raises(ollama.ResponseError) as missing:
        await client.chat(model="nope:latest", messages=HELLO)
    assert missing.value.status_code == 404
    assert missing.value.error == "model 'nope:latest' not found"
    engine.enqueue(TextDelta("Hi"), Failed(EngineFailure("llama_decode failed")))
    with pytest.raises(ollama.ResponseError) as failed:
        async for _ in await client.chat(model="fake-model", messages=HELLO, stream=True):
            pass
    assert failed.value.error == "llama_decode failed"
