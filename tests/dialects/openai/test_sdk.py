"""The official openai SDK as oracle, with strict response validation, against the
app over the fake engine: every chunk and body must parse as the SDK's types."""

from __future__ import annotations

import openai
import pytest
from openai import AsyncOpenAI

from parlance.core.events import Finish, FinishReason, TextDelta, TokenLogprob, TopLogprob, Usage
from parlance.engines.fake import FakeEngine
from tests.support.openai_sdk import sdk

HELLO = [{"role": "user", "content": "Hello!"}]


def _script(*texts: str, reason: FinishReason = FinishReason.STOP):
    return [*(TextDelta(t) for t in texts), Finish(reason), Usage(7, len(texts), 0.02, 0.05)]


async def test_sdk_chat_create_non_stream():
    engine = FakeEngine()
    engine.enqueue(*_script("Hello", " world"))
    completion = await sdk(engine).chat.completions.create(model="fake-model", messages=HELLO)
    assert completion.choices[0].message.content == "Hello world"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage.total_tokens == 9


async def test_sdk_chat_create_stream_with_usage():
    engine = FakeEngine()
    engine.enqueue(*_script("Hel", "lo"))
    stream = await sdk(engine).chat.completions.create(
        model="fake-model", messages=HELLO, stream=True, stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 2
    extra = chunks[-1].usage.model_extra
    assert extra["time_to_first_token"] == 20.0
    assert extra["throughput_after_first_token"] == 20.0


async def test_sdk_chat_stream_helper_accumulates_final_completion():
    engine = FakeEngine()
    engine.enqueue(*_script("A", "B", "C"))
    engine.enqueue(*_script("A", reason=FinishReason.LENGTH))
    client = sdk(engine)
    async with client.chat.completions.stream(model="fake-model", messages=HELLO) as stream:
        deltas = [e.delta async for e in stream if e.type == "content.delta" and e.delta]
        final = await stream.get_final_completion()
    assert deltas == ["A", "B", "C"]
    assert final.choices[0].message.content == "ABC"
    assert final.choices[0].message.role == "assistant"
    assert final.choices[0].finish_reason == "stop"
    # The helper refuses a truncated answer, which proves it saw our finish chunk.
    with pytest.raises(openai.LengthFinishReasonError):
        async with client.chat.completions.stream(model="fake-model", messages=HELLO,
                                                  max_tokens=1) as stream:
            await stream.get_final_completion()


async def test_sdk_chat_logprobs_stream_and_non_stream():
    engine = FakeEngine()
    token = TokenLogprob("Hi", -0.25, (72, 105), (TopLogprob("Hi", -0.25, (72, 105)),))
    script = [TextDelta("Hi", logprobs=(token,)), Finish(FinishReason.STOP), Usage(1, 1)]
    engine.enqueue(*script)
    engine.enqueue(*script)
    client = sdk(engine)
    body = await client.chat.completions.create(model="fake-model", messages=HELLO,
                                                logprobs=True, top_logprobs=1)
    assert body.choices[0].logprobs.content[0].bytes == [72, 105]
    async with client.chat.completions.stream(model="fake-model", messages=HELLO,
                                              logprobs=True, top_logprobs=1) as stream:
        final = await stream.get_final_completion()
    assert final.choices[0].logprobs.content[0].token == "Hi"


async def test_sdk_chat_mid_stream_error_raises_api_error():
    engine = FakeEngine()
    engine.enqueue(TextDelta("x"), RuntimeError("engine died"))
    stream = await sdk(engine).chat.completions.create(model="fake-model", messages=HELLO,
                                                       stream=True)
    with pytest.raises(openai.APIError, match="engine died"):
        async for _ in stream:
            pass


@pytest.mark.parametrize(("kwargs", "error", "status"), [
    ({"model": "nope"}, openai.NotFoundError, 404),
    ({"n": 5}, openai.BadRequestError, 400),  # more choices than the fake engine's 4 slots
    # a prompt longer than the context (max_tokens beyond it is only a ceiling)
    ({"messages": [{"role": "user", "content": "word " * 3000}]},
     openai.PermissionDeniedError, 403),
])
async def test_sdk_chat_errors_map_to_sdk_exceptions(kwargs, error, status):
    params = {"model": "fake-model", "messages": HELLO, **kwargs}
    with pytest.raises(error) as info:
        await sdk(FakeEngine()).chat.completions.create(**params)
    assert info.value.status_code == status


async def test_sdk_authentication_error():
    client = sdk(FakeEngine(), api_keys=("right",))
    with pytest.raises(openai.AuthenticationError):
        await client.chat.completions.create(model="fake-model", messages=HELLO)


async def test_sdk_completions_non_stream_and_stream():
    engine = FakeEngine()
    engine.enqueue(*_script(" upon", " a"))
    engine.enqueue(*_script(" upon", " a"))
    client = sdk(engine)
    body = await client.completions.create(model="fake-model", prompt="Once", max_tokens=2)
    assert body.choices[0].text == " upon a"
    assert body.usage.prompt_tokens == 7
    # Streamed legacy chunks carry `finish_reason: null` until the last one (as OpenAI
    # does), which the SDK's non-optional type rejects under strict validation; read
    # them with the default lenient validation.
    lenient = AsyncOpenAI(base_url="http://test/v1", api_key="k", http_client=client._client)
    stream = await lenient.completions.create(model="fake-model", prompt="Once", max_tokens=2,
                                              stream=True)
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].text for c in chunks) == " upon a"
    assert [c.choices[0].finish_reason for c in chunks] == [None, None, "stop"]


async def test_sdk_models_list_and_retrieve():
    client = sdk(FakeEngine())
    models = await client.models.list()
    assert [m.id for m in models.data] == ["fake-model"]
    assert (await client.models.retrieve("fake-alias")).id == "fake-alias"


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


async def test_sdk_stream_helper_accumulates_tool_calls_once():
    from parlance.engines.fake import Generated

    engine = FakeEngine()
    pieces = ['<tool_call>\n{"name": "get_', 'weather", "arguments": {"city": ', '"Paris"}}\n',
              '</tool_call>\n<tool_call>{"name": "get_weather", "arguments": ',
              '{"city": "Rome"}}</tool_call>']
    engine.enqueue(*(Generated(p) for p in pieces), Finish(FinishReason.STOP), Usage(9, 5))
    async with sdk(engine).chat.completions.stream(
            model="fake-model", messages=HELLO, tools=[WEATHER_TOOL]) as stream:
        done = [event async for event in stream if event.type ==
                "tool_calls.function.arguments.done"]
        final = await stream.get_final_completion()
    calls = final.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather", "get_weather"]
    assert [c.function.arguments for c in calls] == ['{"city": "Paris"}', '{"city": "Rome"}']
    assert len({c.id for c in calls}) == 2 and all(c.id.startswith("call_") for c in calls)
    assert [d.name for d in done] == ["get_weather", "get_weather"]
    assert final.choices[0].finish_reason == "tool_calls"


async def test_sdk_non_stream_tool_calls_and_reasoning_parse_strictly():
    from parlance.engines.fake import Generated

    engine = FakeEngine()
    engine.enqueue(Generated("<think>Weather needed.</think>"),
                   Generated('<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'
                             "</tool_call>"), Finish(FinishReason.STOP), Usage(9, 12))
    completion = await sdk(engine).chat.completions.create(
        model="fake-model", messages=HELLO, tools=[WEATHER_TOOL], tool_choice="required")
    message = completion.choices[0].message
    assert message.content is None
    assert message.tool_calls[0].function.arguments == '{"city": "Oslo"}'
    assert message.model_extra["reasoning_content"] == "Weather needed."
