"""LM Studio `/api/v1/chat` over the fake engine: event order, stream/non-stream
parity, stateful chats, errors in LM Studio's envelope."""

from __future__ import annotations

import httpx
import pytest

from parlance.core.errors import EngineFailure
from parlance.core.events import (
    Finish,
    FinishReason,
    PromptProgress,
    ReasoningDelta,
    TextDelta,
    Usage,
)
from tests.support.asgi_exchange import exchange
from tests.support.fake_app import make_app
from tests.support.lmstudio_contract import check_error, check_result, checked_events
from tests.support.transcripts import assert_transcript

CHAT = "/api/v1/chat"
HELLO = {"model": "fake-model", "input": "Hello!"}


def thinking_answer() -> list:
    return [PromptProgress(2, 8), PromptProgress(8, 8), ReasoningDelta("Need to "),
            ReasoningDelta("greet."),
            TextDelta("Hi"), TextDelta(" there"), Finish(FinishReason.STOP),
            Usage(8, 6, 0.25, 0.5, reasoning_tokens=3)]


async def test_stream_event_order_and_result(client, fake_engine, fixed_ids):
    fake_engine.enqueue(*thinking_answer())
    response = await client.post(CHAT, json={**HELLO, "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    events = checked_events(response.text)
    assert [name for name, _ in events] == [
        "chat.start", "prompt_processing.start", "prompt_processing.progress",
        "prompt_processing.progress", "prompt_processing.end", "reasoning.start",
        "reasoning.delta", "reasoning.delta", "reasoning.end", "message.start",
        "message.delta", "message.delta", "message.end", "chat.end"]
    assert events[0][1] == {"type": "chat.start", "model_instance_id": "fake-model"}
    assert [d["progress"] for n, d in events if n == "prompt_processing.progress"] == [0.25, 1.0]
    result = events[-1][1]["result"]
    check_result(result, stored=True)
    assert result["output"] == [{"type": "reasoning", "content": "Need to greet."},
                                {"type": "message", "content": "Hi there"}]
    assert result["stats"] == {"input_tokens": 8, "total_output_tokens": 6,
                               "reasoning_output_tokens": 3, "tokens_per_second": 10.0,
                               "time_to_first_token_seconds": 0.25}
    assert_transcript("lmstudio_chat_reasoning.sse", response.text)


async def test_stream_and_non_stream_agree(client, fake_engine, fixed_ids):
    fake_engine.enqueue(*thinking_answer())
    fake_engine.enqueue(*thinking_answer())
    streamed = checked_events((await client.post(CHAT, json={**HELLO, "stream": True})).text)
    body = (await client.post(CHAT, json=HELLO)).json()
    check_result(body, stored=True)
    assert streamed[-1][1]["result"] == body


async def test_interleaved_blocks_keep_generation_order(client, fake_engine):
    fake_engine.enqueue(ReasoningDelta("a"), TextDelta("b"), ReasoningDelta("c"), TextDelta("d"),
                        Finish(FinishReason.STOP), Usage(1, 4))
    events = checked_events((await client.post(CHAT, json={**HELLO, "stream": True})).text)
    result = events[-1][1]["result"]
    assert [(i["type"], i["content"]) for i in result["output"]] == [
        ("reasoning", "a"), ("message", "b"), ("reasoning", "c"), ("message", "d")]


async def test_engine_failure_mid_stream_sends_error_then_chat_end(client, fake_engine,
                                                                   fixed_ids):
    fake_engine.enqueue(TextDelta("Partial"), EngineFailure("the GPU caught fire"))
    response = await client.post(CHAT, json={**HELLO, "stream": True})
    events = checked_events(response.text)
    names = [name for name, _ in events]
    assert names[-4:] == ["message.delta", "message.end", "error", "chat.end"]
    assert events[-2][1]["error"]["type"] == "internal_error"
    assert events[-1][1]["result"]["output"] == [{"type": "message", "content": "Partial"}]
    assert_transcript("lmstudio_chat_failure.sse", response.text)


async def test_timeout_mid_stream_ends_by_contract(fake_engine):
    fake_engine.enqueue(TextDelta("Slow"), 5.0, Finish(FinishReason.STOP), Usage(1, 1))
    app = make_app(fake_engine, request_timeout=0.2)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        events = checked_events((await client.post(CHAT, json={**HELLO, "stream": True})).text)
    assert [n for n, _ in events][-2:] == ["error", "chat.end"]
    assert fake_engine.generations[0].cancelled


async def test_request_fields_reach_the_engine(client, fake_engine):
    await client.post(CHAT, json={
        "model": "fake-model", "system_prompt": "Be brief.",
        "input": [{"type": "text", "content": "one"}, {"type": "message", "content": "two"}],
        "temperature": 0.5, "top_p": 0.9, "top_k": 20, "min_p": 0.05, "repeat_penalty": 1.1,
        "max_output_tokens": 2, "reasoning": "off", "store": False})
    request = fake_engine.requests[-1]
    messages = request.prompts[0].messages
    assert [(m.role, m.content) for m in messages] == [("system", "Be brief."),
                                                       ("user", "one\n\ntwo")]
    s = request.sampling
    assert (s.temperature, s.top_p, s.top_k, s.min_p, s.repeat_penalty) == (
        0.5, 0.9, 20, 0.05, 1.1)
    assert request.max_tokens == 2 and request.reasoning.effort.value == "none"


async def test_store_false_has_no_response_id(client):
    body = (await client.post(CHAT, json={**HELLO, "store": False})).json()
    check_result(body, stored=False)


async def test_stateful_chat_continues_and_branches(client, fake_engine):
    first = (await client.post(CHAT, json={**HELLO, "system_prompt": "Be kind."})).json()
    second = (await client.post(CHAT, json={"model": "fake-model", "input": "And then?",
                                            "previous_response_id": first["response_id"]})).json()
    assert second["response_id"] != first["response_id"]
    seen = fake_engine.requests[-1].prompts[0].messages
    assert [(m.role, m.content) for m in seen] == [
        ("system", "Be kind."), ("user", "Hello!"), ("assistant", "Hello there!"),
        ("user", "And then?")]
    # a branch from the first turn does not see the second
    await client.post(CHAT, json={"model": "fake-model", "input": "Other way",
                                  "previous_response_id": first["response_id"]})
    seen = fake_engine.requests[-1].prompts[0].messages
    assert [m.content for m in seen] == ["Be kind.", "Hello!", "Hello there!", "Other way"]


async def test_follow_up_system_prompt_replaces_the_thread_s(client, fake_engine):
    first = (await client.post(CHAT, json={**HELLO, "system_prompt": "Old."})).json()
    response = await client.post(CHAT, json={
        "model": "fake-model", "input": "Again", "system_prompt": "New.",
        "previous_response_id": first["response_id"]})
    assert response.status_code == 200
    seen = fake_engine.requests[-1].prompts[0].messages
    assert [(m.role, m.content) for m in seen][:2] == [("system", "New."), ("user", "Hello!")]
    assert sum(m.role == "system" for m in seen) == 1


async def test_stored_chats_survive_a_restart(tmp_path, fake_engine):
    async def post(body):
        app = make_app(fake_engine, data_dir=tmp_path)
        async with (app.router.lifespan_context(app),
                    httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                      base_url="http://t") as client):
            return (await client.post(CHAT, json=body)).json()

    first = await post(HELLO)
    second = await post({**HELLO, "input": "More", "previous_response_id": first["response_id"]})
    check_result(second, stored=True)
    assert [m.content for m in fake_engine.requests[-1].prompts[0].messages] == [
        "Hello!", "Hello there!", "More"]


async def test_chat_ids_and_responses_ids_do_not_mix(client):
    chat = (await client.post(CHAT, json=HELLO)).json()
    response = await client.post("/v1/responses", json={
        "model": "fake-model", "input": "x", "previous_response_id": chat["response_id"]})
    assert response.status_code == 400
    assert (await client.get(f"/v1/responses/{chat['response_id']}")).status_code == 404


@pytest.mark.parametrize(("body", "status", "kind", "param"), [
    ({"input": "hi"}, 400, "invalid_request", "model"),
    ({"model": "fake-model"}, 400, "invalid_request", "input"),
    ({**HELLO, "model": "nope"}, 404, "model_not_found", "model"),
    ({**HELLO, "previous_response_id": "abc"}, 400, "invalid_request", "previous_response_id"),
    ({**HELLO, "previous_response_id": "resp_" + "0" * 48}, 400, "invalid_request",
     "previous_response_id"),
    ({**HELLO, "reasoning": "maybe"}, 400, "invalid_request", "reasoning"),
    ({**HELLO, "temperature": "hot"}, 400, "invalid_request", "temperature"),
    ({**HELLO, "input": [{"type": "image", "data_url": "data:image/png;base64,AA=="}]}, 400,
     "invalid_request", "input[0]"),
    ({**HELLO, "integrations": [{"type": "ephemeral_mcp", "server_label": "x"}]}, 400,
     "invalid_request", "integrations[0].server_url"),
    ({**HELLO, "tool_choice": "required"}, 400, "invalid_request", "tool_choice"),
])
async def test_bad_requests_get_lm_studio_errors(client, body, status, kind, param):
    for stream in (False, True):
        response = await client.post(CHAT, json={**body, "stream": stream})
        assert response.status_code == status, response.text
        error = response.json()["error"]
        check_error(error)
        assert (error["type"], error.get("param")) == (kind, param)


async def test_bad_json_and_auth(fake_engine):
    app = make_app(fake_engine, api_keys=("sk-lm-test1234:abcdefghijklmnopqrst",))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        missing = await client.post(CHAT, json=HELLO)
        assert missing.status_code == 401
        assert missing.json()["error"]["type"] == "invalid_request"
        ok = await client.post(CHAT, json=HELLO, headers={
            "Authorization": "Bearer sk-lm-test1234:abcdefghijklmnopqrst"})
        assert ok.status_code == 200
        bad = await client.post(CHAT, content=b"{nope", headers={
            "Authorization": "Bearer sk-lm-test1234:abcdefghijklmnopqrst"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"


async def test_context_overflow_is_a_400(client, fake_engine):
    response = await client.post(CHAT, json={**HELLO, "input": "word " * 3000})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


async def test_client_disconnect_cancels_the_generation(fake_engine):
    fake_engine.enqueue(*[x for i in range(1000) for x in (TextDelta(f"t{i}"), 0.002)])
    chunks = (await exchange(make_app(fake_engine), CHAT, {**HELLO, "stream": True},
                             leave_after=3, timeout=60.0)).chunks
    generation = fake_engine.generations[-1]
    assert generation.cancelled and not generation.finished
    assert len(chunks) < 50
