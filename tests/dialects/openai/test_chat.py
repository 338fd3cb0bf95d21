"""Chat Completions encoder and parser, driven through the app with the fake engine."""

from __future__ import annotations

import pytest

from parlance.core.errors import EngineFailure
from parlance.core.events import (
    Failed,
    Finish,
    FinishReason,
    TextDelta,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from parlance.core.tools import ReasoningEffort
from tests.support.sse import sse_data
from tests.support.transcripts import assert_transcript

CHAT = "/v1/chat/completions"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
HELLO = {"model": "fake-model", "messages": [{"role": "user", "content": "Hello!"}]}


async def test_chat_stream_transcript_with_usage(client, fake_engine, fixed_ids):
    fake_engine.enqueue(TextDelta("Hi"), TextDelta(" there"), Finish(FinishReason.STOP),
                        Usage(6, 2, 0.05, 0.1))
    response = await client.post(CHAT, json={**HELLO, "stream": True,
                                             "stream_options": {"include_usage": True}})
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert_transcript("chat_stream_usage.sse", response.text)


async def test_chat_stream_without_include_usage_has_no_usage_chunk(client, fake_engine):
    response = await client.post(CHAT, json={**HELLO, "stream": True})
    frames = sse_data(response.text)
    assert frames[-1] == "[DONE]"
    chunks = frames[:-1]
    assert all(c["choices"] for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}  # as OpenAI sends it
    assert chunks[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None,
                                        "finish_reason": "stop"}
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert len({(c["id"], c["created"], c["model"], c["object"]) for c in chunks}) == 1


async def test_chat_stream_engine_failure_ends_with_error_frame_then_done(
        client, fake_engine, fixed_ids):
    fake_engine.enqueue(TextDelta("Hi"), Failed(EngineFailure("llama_decode failed")))
    response = await client.post(CHAT, json={**HELLO, "stream": True})
    assert response.status_code == 200
    assert_transcript("chat_stream_engine_failure.sse", response.text)


async def test_chat_stream_exception_in_engine_is_an_error_frame(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hi"), RuntimeError("segfault-ish"))
    frames = sse_data((await client.post(CHAT, json={**HELLO, "stream": True})).text)
    assert frames[-2]["error"]["type"] == "server_error"
    assert frames[-1] == "[DONE]"


async def test_chat_stream_logprobs_transcript(client, fake_engine, fixed_ids):
    top = (TopLogprob("Hi", -0.1, (72, 105)), TopLogprob("Yo", -2.5, (89, 111)))
    fake_engine.enqueue(TextDelta("Hi", logprobs=(TokenLogprob("Hi", -0.1, (72, 105), top),)),
                        Finish(FinishReason.LENGTH), Usage(6, 1))
    response = await client.post(CHAT, json={**HELLO, "stream": True, "logprobs": True,
                                             "top_logprobs": 2, "max_tokens": 1})
    assert_transcript("chat_stream_logprobs.sse", response.text)


async def test_chat_non_stream_matches_seed_004_shape(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hello"), TextDelta("!"), Finish(FinishReason.STOP),
                        Usage(6, 2))
    body = (await client.post(CHAT, json=HELLO)).json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-") and isinstance(body["created"], int)
    assert body["model"] == "fake-model"
    assert body["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "Hello!",
                                                        "refusal": None},
                                "logprobs": None, "finish_reason": "stop"}]
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 2, "total_tokens": 8,
                             "prompt_tokens_details": {"cached_tokens": 0},
                             "completion_tokens_details": {"reasoning_tokens": 0}}


async def test_chat_stream_and_non_stream_agree(client, fake_engine):
    script = [TextDelta("a"), TextDelta("b"), Finish(FinishReason.LENGTH), Usage(1, 2)]
    fake_engine.enqueue(*script)
    fake_engine.enqueue(*script)
    streamed = sse_data((await client.post(CHAT, json={**HELLO, "stream": True})).text)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in streamed[:-1])
    body = (await client.post(CHAT, json=HELLO)).json()
    assert text == body["choices"][0]["message"]["content"] == "ab"
    assert streamed[-2]["choices"][0]["finish_reason"] == body["choices"][0][
        "finish_reason"] == "length"


async def test_chat_alias_is_echoed_and_omitted_model_means_default(client):
    alias = (await client.post(CHAT, json={**HELLO, "model": "fake-alias"})).json()
    assert alias["model"] == "fake-alias"
    default = (await client.post(CHAT, json={"messages": HELLO["messages"]})).json()
    assert default["model"] == "fake-model"


async def test_chat_request_maps_to_core_request(client, fake_engine):
    await client.post(CHAT, json={
        **HELLO, "temperature": 0, "top_p": 0.5, "top_k": 7, "min_p": 0.1, "seed": 3,
        "stop": "END", "max_completion_tokens": 9, "presence_penalty": 0.5,
        "frequency_penalty": -0.5, "repeat_penalty": 1.1, "logit_bias": {"42": -100},
        "messages": [{"role": "system", "content": "S"},
                     {"role": "user", "content": [{"type": "text", "text": "a"},
                                                  {"type": "text", "text": "b"}]},
                     {"role": "assistant", "content": None,
                      "tool_calls": [{"id": "c1", "type": "function",
                                      "function": {"name": "f", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": "42"}],
    })
    request = fake_engine.requests[-1]
    sampling = request.sampling
    got = (sampling.temperature, sampling.top_p, sampling.top_k, sampling.min_p)
    assert got == (0, 0.5, 7, 0.1)
    assert (sampling.seed, sampling.repeat_penalty, sampling.logit_bias) == (3, 1.1, ((42, -100),))
    assert request.stop == ("END",) and request.max_tokens == 9
    messages = request.prompts[0].messages
    assert [m.role for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[1].content == "ab"
    assert messages[2].tool_calls[0].name == "f" and messages[3].tool_call_id == "c1"


@pytest.mark.parametrize(("body", "param"), [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 5}, "n"),  # above the 4 slots
    ({"messages": [{"role": "user", "content": "x"}], "temperature": 3}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature"),
    ({"messages": [{"role": "user", "content": "x"}], "top_p": 1.5}, "top_p"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "5"}, "max_tokens"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": ["a"] * 5}, "stop"),
    ({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"x": 1}}, "logit_bias"),
    ({"messages": [{"role": "user", "content": "x"}], "logit_bias": {"1": 101}}, "logit_bias.1"),
    ({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, None),
    ({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21},
     "top_logprobs"),
    ({"messages": [{"role": "user", "content": "x"}], "presence_penalty": -3},
     "presence_penalty"),
    ({"messages": [{"role": "bot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages[0].content[0]"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
     "tools[0].function"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "custom"}]},
     "tools[0].type"),
    ({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "no spaces"}}]},
     "tools[0].function.name"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [WEATHER, WEATHER]},
     "tools[1].function.name"),
    ({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "strin"}}}]},
     "tools[0].function.parameters"),
    ({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"}, "tool_choice"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [WEATHER],
      "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {
          "name": "x", "schema": {"type": "object", "required": 3}}}},
     "response_format.json_schema.schema"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}},
     "response_format.type"),
    ({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "extreme"},
     "reasoning_effort"),
    ({"messages": [{"role": "user", "content": "x"}], "reasoning": {"effort": "extreme"}},
     "reasoning.effort"),
    ({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "low",
      "reasoning": {"effort": "high"}}, "reasoning.effort"),
    ({"messages": "hi"}, "messages"),
])
async def test_chat_invalid_requests_are_400_naming_the_param(client, body, param):
    for stream in (False, True):
        response = await client.post(CHAT, json={**body, "stream": stream})
        assert response.status_code == 400, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["param"] == param
        assert error["message"]


@pytest.mark.parametrize(("body", "param"), [
    ({"reasoning": {"effort": "low"}}, "reasoning.effort"),  # the nested spelling clients also send
    ({"reasoning_effort": "low"}, "reasoning_effort"),
    ({"reasoning_effort": "low", "reasoning": {"effort": "low"}}, "reasoning_effort"),
])
async def test_chat_reasoning_object_is_read_like_reasoning_effort(client, fake_engine, body,
                                                                    param):
    response = await client.post(CHAT, json={**HELLO, **body})
    assert response.status_code == 200, response.text
    wanted = fake_engine.requests[-1].reasoning
    assert (wanted.effort, wanted.param) == (ReasoningEffort.LOW, param)


async def test_chat_body_not_json_or_not_object_is_400(client):
    bad = await client.post(CHAT, content=b"{nope", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"
    array = await client.post(CHAT, json=[1, 2])
    assert array.status_code == 400


async def test_chat_unknown_model_is_404_model_not_found(client):
    response = await client.post(CHAT, json={**HELLO, "model": "gpt-9", "stream": True})
    assert response.status_code == 404
    assert response.json()["error"] == {
        "message": "The model 'gpt-9' does not exist or is not served here.",
        "type": "invalid_request_error", "param": "model", "code": "model_not_found"}


async def test_chat_context_overflow_is_403_before_any_byte(client):
    long = [{"role": "user", "content": "word " * 3000}]
    response = await client.post(CHAT, json={**HELLO, "messages": long, "stream": True})
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "tokens_exceeded_error"
