"""The official anthropic SDK as oracle, with strict response validation, against the
app over the fake engine: create, the stream helpers, count_tokens, a tool round trip."""

from __future__ import annotations

import anthropic
import httpx2
import pytest
from anthropic import AsyncAnthropic

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine, Generated
from tests.support.fake_app import make_app

HELLO = [{"role": "user", "content": "Hello!"}]
WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"], "additionalProperties": False}}


def sdk(engine: FakeEngine, **settings) -> AsyncAnthropic:
    """The SDK (2.x speaks through httpx2, the successor of httpx) on the app in process."""
    transport = httpx2.ASGITransport(app=make_app(engine, **settings))
    return AsyncAnthropic(base_url="http://test", api_key="sk-test", max_retries=0,
                          http_client=httpx2.AsyncClient(transport=transport),
                          _strict_response_validation=True)


async def test_sdk_create_non_stream():
    engine = FakeEngine()
    engine.enqueue(TextDelta("Hello"), TextDelta(" world"), Finish(FinishReason.STOP),
                   Usage(7, 2))
    message = await sdk(engine).messages.create(model="fake-model", max_tokens=64,
                                                messages=HELLO)
    assert message.content[0].type == "text" and message.content[0].text == "Hello world"
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert (message.usage.input_tokens, message.usage.output_tokens) == (7, 2)


async def test_sdk_stream_helper_and_final_message_with_thinking():
    engine = FakeEngine()
    engine.enqueue(Generated("<think>Let me"), Generated(" think.</think>"), Generated("Yes"),
                   Generated(", indeed."), Finish(FinishReason.STOP), Usage(7, 6))
    client = sdk(engine)
    async with client.messages.stream(
            model="fake-model", max_tokens=4096, messages=HELLO,
            thinking={"type": "enabled", "budget_tokens": 1024}) as stream:
        texts = [text async for text in stream.text_stream]
        final = await stream.get_final_message()
    assert texts == ["Yes", ", indeed."]
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "Let me think."
    assert final.content[0].signature  # sent once, before the block stops
    assert final.content[1].text == "Yes, indeed."
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 6


async def test_sdk_raw_stream_events():
    engine = FakeEngine()
    stream = await sdk(engine).messages.create(model="fake-model", max_tokens=1,
                                               messages=HELLO, stream=True)
    types = [event.type async for event in stream]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]


async def test_sdk_stop_sequence():
    engine = FakeEngine(default_reply="one two three four")
    message = await sdk(engine).messages.create(model="fake-model", max_tokens=64,
                                                messages=HELLO, stop_sequences=[" three"])
    assert message.content[0].text == "one two"
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", " three")


async def test_sdk_count_tokens():
    result = await sdk(FakeEngine()).messages.count_tokens(
        model="fake-model", system="Be brief.", messages=HELLO, tools=[WEATHER])
    assert result.input_tokens == 3  # the fake engine counts the words of the prompt


async def test_sdk_tool_round_trip():
    engine = FakeEngine()
    engine.enqueue(Generated('<tool_call>\n{"name": "get_weather", "arguments": '
                             '{"city": "Paris"}}\n</tool_call>'),
                   Finish(FinishReason.STOP), Usage(9, 12))
    engine.enqueue(TextDelta("It is sunny in Paris."), Finish(FinishReason.STOP), Usage(20, 6))
    client = sdk(engine)
    async with client.messages.stream(model="fake-model", max_tokens=256, messages=HELLO,
                                      tools=[WEATHER],
                                      tool_choice={"type": "any"}) as stream:
        first = await stream.get_final_message()
    assert first.stop_reason == "tool_use"
    call = first.content[-1]
    assert call.type == "tool_use" and call.name == "get_weather"
    assert call.input == {"city": "Paris"}
    history = [*HELLO, {"role": "assistant", "content": first.content},
               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                             "content": "Sunny, 24 C"}]}]
    second = await client.messages.create(model="fake-model", max_tokens=256,
                                          messages=history, tools=[WEATHER])
    assert second.content[0].text == "It is sunny in Paris."
    seen = engine.requests[-1].prompts[0].messages
    assert seen[-2].tool_calls[0].id == call.id
    assert (seen[-1].role, seen[-1].tool_call_id, seen[-1].content) == ("tool", call.id,
                                                                        "Sunny, 24 C")


async def test_sdk_errors_are_typed():
    client = sdk(FakeEngine(), api_keys=("sk-other",))
    with pytest.raises(anthropic.AuthenticationError) as refused:
        await client.messages.create(model="fake-model", max_tokens=8, messages=HELLO)
    assert refused.value.body["error"]["type"] == "authentication_error"
    client = sdk(FakeEngine())
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.create(model="no-such-model", max_tokens=8, messages=HELLO)
    with pytest.raises(anthropic.BadRequestError) as bad:
        await client.messages.create(model="fake-model", max_tokens=8, messages=[
            {"role": "user", "content": [{"type": "image", "source": {
                "type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}]}])
    assert "messages[0].content[0]" in bad.value.message


async def test_sdk_model_list():
    page = await sdk(FakeEngine()).models.list()
    assert [m.id for m in page.data] == ["fake-model"]
    model = await sdk(FakeEngine()).models.retrieve("fake-alias")
    assert model.id == "fake-alias" and model.type == "model"
