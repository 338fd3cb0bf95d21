"""Anthropic Messages: stream transcripts, request mapping, errors and the model list,
driven through the app with the fake engine; every event checked by the SDK's types."""

from __future__ import annotations

import httpx
import pytest

from parlance.core.errors import EngineFailure, Overloaded
from parlance.core.events import Failed, Finish, FinishReason, TextDelta, Usage
from parlance.core.messages import Message, ToolCall
from parlance.core.tools import ReasoningEffort, ToolChoice
from parlance.engines.fake import FakeEngine, Generated
from tests.support.anthropic_contract import check_error, check_message, stream_events
from tests.support.fake_app import make_app
from tests.support.transcripts import assert_transcript

MESSAGES = "/v1/messages"
HELLO = {"model": "fake-model", "max_tokens": 64,
         "messages": [{"role": "user", "content": "Hello!"}]}
WEATHER = {"name": "get_weather", "description": "Current weather in a city",
           "input_schema": {"$schema": "http://json-schema.org/draft-07/schema#",
                            "type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"], "additionalProperties": False}}


async def _stream(client, body: dict) -> str:
    response = await client.post(MESSAGES + "?beta=true", json={**body, "stream": True})
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    return response.text


async def test_text_stream_transcript(client, fake_engine, fixed_ids):
    fake_engine.enqueue(TextDelta("Hi"), TextDelta(" there"), Finish(FinishReason.STOP),
                        Usage(6, 2))
    body = await _stream(client, HELLO)
    assert_transcript("anthropic_text.sse", body)
    events = stream_events(body)
    assert [e["type"] for e in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta",
        "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert events[0]["message"]["usage"]["input_tokens"] == 1  # the fake counts words
    assert events[-2]["usage"] == {"input_tokens": 6, "cache_creation_input_tokens": 0,
                                   "cache_read_input_tokens": 0, "output_tokens": 2}


async def test_cached_prompt_tokens_are_cache_reads(client, fake_engine, fixed_ids):
    """As on Anthropic, the prompt splits into `input_tokens` (evaluated now) and
    `cache_read_input_tokens` (reused from the cache); the stream's final usage is in
    `message_delta`, since the split is known only once the engine admits the request."""
    fake_engine.enqueue(TextDelta("Hi"), Finish(FinishReason.STOP), Usage(6, 1, cached_tokens=4))
    events = stream_events(await _stream(client, HELLO))
    assert events[-2]["usage"] == {"input_tokens": 2, "cache_creation_input_tokens": 0,
                                   "cache_read_input_tokens": 4, "output_tokens": 1}
    fake_engine.enqueue(TextDelta("Hi"), Finish(FinishReason.STOP), Usage(6, 1, cached_tokens=4))
    response = await client.post(MESSAGES, json=HELLO)
    assert response.json()["usage"] == events[-2]["usage"]


async def test_thinking_then_text_stream_transcript(client, fake_engine, fixed_ids):
    fake_engine.enqueue(Generated("<think>Short"), Generated(" thought.</think>"),
                        Generated("The answer."), Finish(FinishReason.STOP), Usage(6, 4))
    body = await _stream(client, {**HELLO, "max_tokens": 2048,
                                  "thinking": {"type": "enabled", "budget_tokens": 1024}})
    assert_transcript("anthropic_thinking.sse", body)
    events = stream_events(body)
    deltas = [e["delta"]["type"] for e in events if e["type"] == "content_block_delta"]
    assert deltas == ["thinking_delta", "thinking_delta", "signature_delta", "text_delta"]
    starts = [(e["index"], e["content_block"]["type"]) for e in events
              if e["type"] == "content_block_start"]
    assert starts == [(0, "thinking"), (1, "text")]
    reasoning = fake_engine.requests[-1].reasoning
    assert (reasoning.effort, reasoning.budget_tokens) == (ReasoningEffort.ON, 1024)


async def test_tool_use_stream_transcript(client, fake_engine, fixed_ids):
    fake_engine.enqueue(Generated("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", "),
                        Generated('"arguments": {"city": "Paris"}}\n</tool_call>'),
                        Finish(FinishReason.STOP), Usage(9, 12))
    body = await _stream(client, {**HELLO, "tools": [WEATHER]})
    assert_transcript("anthropic_tool_use.sse", body)
    events = stream_events(body)
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    tool = next(e for e in events if e["type"] == "content_block_start" and e["index"] == 1)
    # Anthropic's spelling of the engine's call id
    assert tool["content_block"] == {"type": "tool_use", "id": "toolu_test",
                                     "name": "get_weather", "input": {}}
    fragments = "".join(e["delta"]["partial_json"] for e in events
                        if e["type"] == "content_block_delta" and e["index"] == 1)
    assert fragments.replace(" ", "") == '{"city":"Paris"}'


async def test_parallel_tool_use_blocks_are_consecutive(client, fake_engine, fixed_ids):
    call = '<tool_call>\n{{"name": "get_weather", "arguments": {{"city": "{}"}}}}\n</tool_call>'
    fake_engine.enqueue(Generated(call.format("Paris") + "\n" + call.format("Rome")),
                        Finish(FinishReason.STOP), Usage(9, 20))
    body = await _stream(client, {**HELLO, "tools": [WEATHER]})
    assert_transcript("anthropic_parallel_tool_use.sse", body)
    events = stream_events(body)
    starts = [e["index"] for e in events if e["type"] == "content_block_start"]
    stops = [e["index"] for e in events if e["type"] == "content_block_stop"]
    assert starts == stops == [0, 1]


async def test_max_tokens_cut_stream_transcript(client, fake_engine, fixed_ids):
    body = await _stream(client, {**HELLO, "max_tokens": 1})  # default reply, cut at 1
    assert_transcript("anthropic_max_tokens.sse", body)
    events = stream_events(body)
    assert events[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert events[-2]["usage"]["output_tokens"] == 1


async def test_stop_sequence_names_the_one_that_matched(client, fake_engine, fixed_ids):
    body = await _stream(client, {**HELLO, "stop_sequences": ["nowhere", "there"]})
    assert_transcript("anthropic_stop_sequence.sse", body)
    events = stream_events(body)
    assert events[-2]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "there"}
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert text == "Hello "
    assert fake_engine.requests[-1].stop == ("nowhere", "there")


async def test_mid_stream_failure_is_an_error_event(client, fake_engine, fixed_ids):
    fake_engine.enqueue(TextDelta("Hi"), Failed(EngineFailure("llama_decode failed")))
    body = await _stream(client, HELLO)
    assert_transcript("anthropic_failure.sse", body)
    events = stream_events(body)
    assert events[-1] == {"type": "error", "error": {"type": "api_error",
                                                     "message": "llama_decode failed"}}
    assert "message_stop" not in [e["type"] for e in events]


async def test_mid_stream_overload_is_an_overloaded_error_event(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hi"), Failed(Overloaded("queue full")))
    events = stream_events(await _stream(client, HELLO))
    assert events[-1]["error"]["type"] == "overloaded_error"


async def test_non_stream_message_agrees_with_the_stream(client, fake_engine):
    script = (Generated("<think>Hmm.</think>Sure.\n<tool_call>\n{\"name\": \"get_weather\", "
                        "\"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"),
              Finish(FinishReason.STOP), Usage(9, 12))
    fake_engine.enqueue(*script)
    response = await client.post(MESSAGES, json={**HELLO, "tools": [WEATHER]})
    assert response.status_code == 200
    message = check_message(response.json())
    assert message.id.startswith("msg_") and message.model == "fake-model"
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[2].input == {"city": "Oslo"}
    assert message.stop_reason == "tool_use"
    assert (message.usage.input_tokens, message.usage.output_tokens) == (9, 12)
    fake_engine.enqueue(*script)
    events = stream_events(await _stream(client, {**HELLO, "tools": [WEATHER]}))
    signatures = [e["delta"]["signature"] for e in events
                  if e["type"] == "content_block_delta" and e["delta"]["type"] == "signature_delta"]
    assert signatures == [message.content[0].signature]


async def test_request_maps_to_the_neutral_request(client, fake_engine):
    body = {
        "model": "fake-model", "max_tokens": 100, "temperature": 0.5, "top_k": 7,
        "stop_sequences": ["END"], "metadata": {"user_id": "u1"}, "service_tier": "auto",
        "context_management": {"edits": []}, "a_field_from_the_future": 1,
        "system": [{"type": "text", "text": "Be brief.",
                    "cache_control": {"type": "ephemeral"}}],
        "tools": [WEATHER],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Weather?"},
                                         {"type": "document", "title": "Notes",
                                          "source": {"type": "text", "media_type": "text/plain",
                                                     "data": "It rains."}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Call it.", "signature": "x"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                 "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather",
                 "input": {"city": "Atlantis"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "Sunny"}]},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such city",
                 "is_error": True},
                {"type": "text", "text": "Thanks", "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": "Mid-conversation note."},
            {"role": "user", "content": "And tomorrow?"},
            {"role": "user", "content": "In Celsius."},
        ],
    }
    response = await client.post(MESSAGES, json=body)
    assert response.status_code == 200, response.text
    request = fake_engine.requests[-1]
    assert request.prompts[0].messages == (
        Message("system", "Be brief."),
        Message("user", "Weather?\n\nNotes\n\nIt rains."),
        Message("assistant", "", tool_calls=(
            ToolCall("toolu_1", "get_weather", '{"city": "Oslo"}'),
            ToolCall("toolu_2", "get_weather", '{"city": "Atlantis"}')), reasoning="Call it."),
        Message("tool", "Sunny", tool_call_id="toolu_1"),
        Message("tool", "Error: no such city", tool_call_id="toolu_2"),
        Message("user", "Thanks"),
        Message("system", "Mid-conversation note."),
        Message("user", "And tomorrow?\n\nIn Celsius."),
    )
    assert request.tool_choice == ToolChoice("required")
    assert request.parallel_tool_calls is False
    assert request.tools[0].parameters == WEATHER["input_schema"]
    assert (request.sampling.temperature, request.sampling.top_k) == (0.5, 7)
    assert request.sampling_set == {"temperature", "top_k"}
    assert (request.max_tokens, request.stop) == (100, ("END",))
    assert not request.continue_final  # the conversation ends with the user


async def test_a_trailing_assistant_message_is_a_prefill(client, fake_engine):
    fake_engine.enqueue(TextDelta(" Paris."), Finish(FinishReason.STOP), Usage(9, 2))
    body = {**HELLO, "messages": [{"role": "user", "content": "Capital of France?"},
                                  {"role": "assistant", "content": "The capital is"}]}
    response = await client.post(MESSAGES, json=body)
    assert response.json()["content"] == [{"type": "text", "text": " Paris."}]
    request = fake_engine.requests[-1]
    assert request.continue_final
    assert request.prompts[0].messages[-1] == Message("assistant", "The capital is")


@pytest.mark.parametrize(("choice", "expected"), [
    ({"type": "auto"}, ToolChoice("auto")),
    ({"type": "none"}, ToolChoice("none")),
    ({"type": "tool", "name": "get_weather"}, ToolChoice("named", "get_weather")),
])
async def test_tool_choice_modes(client, fake_engine, choice, expected):
    response = await client.post(MESSAGES, json={**HELLO, "tools": [WEATHER],
                                                 "tool_choice": choice})
    assert response.status_code == 200, response.text
    assert fake_engine.requests[-1].tool_choice == expected


@pytest.mark.parametrize(("fields", "effort"), [
    ({"thinking": {"type": "disabled"}}, ReasoningEffort.NONE),
    ({"thinking": {"type": "adaptive"}}, ReasoningEffort.ON),
    ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}},
     ReasoningEffort.LOW),
    ({}, None),
])
async def test_thinking_maps_to_the_reasoning_request(client, fake_engine, fields, effort):
    response = await client.post(MESSAGES, json={**HELLO, **fields})
    assert response.status_code == 200, response.text
    reasoning = fake_engine.requests[-1].reasoning
    assert (reasoning.effort if reasoning else None) is effort


@pytest.mark.parametrize(("change", "param_words"), [
    ({"max_tokens": None}, "max_tokens"),
    ({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": "iVBORw0KGgo="}}]}]},
     "messages[0].content[1]"),
    ({"thinking": {"type": "enabled", "budget_tokens": 512}}, "budget_tokens"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024}}, "max_tokens"),
    ({"tool_choice": {"type": "tool", "name": "nope"}}, "nope"),
    ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "web_search"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {
        "type": "url", "url": "https://example.com/a.pdf"}}]}]}, "text source"),
    ({"temperature": 1.5}, "temperature"),
    ({"tools": [], "tool_choice": {"type": "any"}}, "'any' needs tools"),
    ({"mcp_servers": [{"type": "url", "url": "https://mcp.example/sse", "name": "x"}]},
     "--allow-request-mcp"),  # per-request MCP servers are off by default
])
async def test_bad_requests_are_400_in_anthropics_envelope(client, change, param_words):
    body = {k: v for k, v in {**HELLO, "tools": [WEATHER], **change}.items() if v is not None}
    response = await client.post(MESSAGES, json=body)
    assert response.status_code == 400, response.text
    error = check_error(response.json())
    assert error["type"] == "invalid_request_error"
    assert param_words in error["message"]
    assert response.headers["request-id"] == response.json()["request_id"]


async def test_max_tokens_is_a_ceiling_and_only_the_prompt_can_overflow():
    """Claude Code asks for 32k tokens whatever the model: the answer ends with
    `max_tokens` where the context is full; a prompt that does not fit is a 400 saying
    the prompt is too long."""
    engine = FakeEngine(context_length=8, default_reply="one two three four five six seven eight")
    app = make_app(engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        fits = await client.post(MESSAGES, json={**HELLO, "max_tokens": 32000})
        long = {**HELLO, "stream": True,
                "messages": [{"role": "user", "content": "word " * 8}]}
        overflow = await client.post(MESSAGES, json=long)
    assert fits.status_code == 200, fits.text
    assert engine.requests[-1].max_tokens == 32000
    assert fits.json()["stop_reason"] == "max_tokens"
    assert fits.json()["usage"]["output_tokens"] == 7  # the room the one-word prompt left
    assert overflow.status_code == 400
    error = check_error(overflow.json())
    assert error["message"].startswith("prompt is too long")


async def test_unknown_model_and_unknown_path_are_404_not_found_error(client):
    response = await client.post(MESSAGES, json={**HELLO, "model": "nope"})
    assert response.status_code == 404
    assert check_error(response.json())["type"] == "not_found_error"
    response = await client.post(MESSAGES + "/nothing", json=HELLO)
    assert response.status_code == 404
    assert check_error(response.json())["type"] == "not_found_error"


@pytest.mark.parametrize("header", ["x-api-key", "authorization"])
async def test_api_key_by_x_api_key_or_bearer(fake_engine, header):
    app = make_app(fake_engine, api_keys=("sk-right",))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        refused = await client.post(MESSAGES, json=HELLO, headers={"x-api-key": "sk-wrong"})
        value = "sk-right" if header == "x-api-key" else "Bearer sk-right"
        accepted = await client.post(MESSAGES, json=HELLO, headers={header: value})
    assert refused.status_code == 401
    assert check_error(refused.json())["type"] == "authentication_error"
    assert accepted.status_code == 200


async def test_count_tokens(client, fake_engine):
    body = {"model": "fake-model", "system": "Be brief.",
            "messages": [{"role": "user", "content": "How many words here?"}]}
    response = await client.post(MESSAGES + "/count_tokens?beta=true", json=body)
    assert response.status_code == 200
    assert response.json() == {"input_tokens": 6}  # the fake engine counts words
    response = await client.post(MESSAGES + "/count_tokens", json={"model": "fake-model"})
    assert response.status_code == 400
    assert "messages" in check_error(response.json())["message"]


async def test_model_list_in_anthropics_shape_with_anthropic_version(client):
    headers = {"anthropic-version": "2023-06-01"}
    listed = (await client.get("/v1/models", headers=headers)).json()
    assert listed == {"data": [{"type": "model", "id": "fake-model", "display_name": "fake-model",
                                "created_at": "2023-11-14T22:13:20Z",
                                "lifecycle": "active"}],
                      "has_more": False, "first_id": "fake-model", "last_id": "fake-model"}
    one = (await client.get("/v1/models/fake-alias", headers=headers)).json()
    assert one["type"] == "model" and one["id"] == "fake-alias"
    assert (await client.get("/v1/models")).json()["object"] == "list"  # OpenAI's otherwise


async def test_output_config_format_is_the_neutral_json_schema_format(client, fake_engine):
    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"], "additionalProperties": False}
    response = await client.post(MESSAGES, json={**HELLO, "output_config": {
        "effort": "high", "format": {"type": "json_schema", "schema": schema}}})
    assert response.status_code == 200, response.text
    request = fake_engine.requests[-1]
    assert request.response_format is not None
    assert (request.response_format.kind, request.response_format.schema) == ("json_schema",
                                                                              schema)
    assert request.reasoning.effort is ReasoningEffort.HIGH


async def test_missing_api_key_names_both_headers(fake_engine):
    app = make_app(fake_engine, api_keys=("sk-right",))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://test") as client:
        refused = await client.post(MESSAGES, json=HELLO)
    assert refused.status_code == 401
    assert "x-api-key" in check_error(refused.json())["message"]
