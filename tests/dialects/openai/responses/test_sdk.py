"""The official openai SDK's Responses client, strict validation on, against the app
over the fake engine: create, the stream helper, retrieve, chain, list, count, delete."""

from __future__ import annotations

import openai
import pytest

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine, Generated
from tests.support.openai_sdk import sdk

WEATHER = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


async def test_create_retrieve_chain_list_count_delete():
    engine = FakeEngine()
    engine.enqueue(TextDelta("Paris."), Finish(FinishReason.STOP), Usage(6, 2))
    client = sdk(engine)
    first = await client.responses.create(model="fake-model", input="Capital of France?",
                                          instructions="Be brief.", metadata={"k": "v"})
    assert first.output_text == "Paris." and first.status == "completed"
    assert first.usage.total_tokens == 8
    again = await client.responses.retrieve(first.id)
    assert again.id == first.id and again.output_text == "Paris."
    second = await client.responses.create(model="fake-model", input="And Italy?",
                                           previous_response_id=first.id)
    assert second.previous_response_id == first.id
    items = await client.responses.input_items.list(second.id)
    assert [i.type for i in items.data] == ["message", "message", "message"]
    count = await client.responses.input_tokens.count(model="fake-model", input="a b c")
    assert count.input_tokens == 3
    await client.responses.delete(first.id)
    with pytest.raises(openai.NotFoundError):
        await client.responses.retrieve(first.id)
    with pytest.raises(openai.BadRequestError) as caught:
        await client.responses.create(model="fake-model", input="x",
                                      previous_response_id=first.id)
    assert caught.value.body["code"] == "previous_response_not_found"


async def test_stream_helper_text_and_function_call():
    engine = FakeEngine()
    engine.enqueue(Generated("Checking. "),
                   Generated('<tool_call>{"name": "get_weather", "arguments": {"city": '),
                   Generated('"Oslo"}}</tool_call>'), Finish(FinishReason.STOP), Usage(6, 12))
    async with sdk(engine).responses.stream(model="fake-model", input="Weather in Oslo?",
                                            tools=[WEATHER]) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    message, call = final.output
    assert message.type == "message" and message.content[0].text == "Checking. "
    assert call.type == "function_call" and call.name == "get_weather"
    assert call.arguments == '{"city": "Oslo"}' and call.call_id != call.id


async def test_stream_replay_parses():
    engine = FakeEngine()
    engine.enqueue(TextDelta("Hi"), Finish(FinishReason.STOP), Usage(6, 1))
    client = sdk(engine)
    created = await client.responses.create(model="fake-model", input="Hello")
    replayed = await client.responses.retrieve(created.id, stream=True)
    kinds = [event.type async for event in replayed]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"


async def test_function_call_output_round_trip():
    engine = FakeEngine()
    engine.enqueue(Generated('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'
                             "</tool_call>"), Finish(FinishReason.STOP), Usage(6, 12))
    client = sdk(engine)
    first = await client.responses.create(model="fake-model", input="Weather in Oslo?",
                                          tools=[WEATHER], tool_choice="required")
    [call] = first.output
    await client.responses.create(
        model="fake-model", previous_response_id=first.id, tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "4 C"}])
    messages = engine.requests[-1].prompts[0].messages
    assert messages[-2].tool_calls[0].id == call.call_id
    assert (messages[-1].role, messages[-1].tool_call_id, messages[-1].content) == (
        "tool", call.call_id, "4 C")
