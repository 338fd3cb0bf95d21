"""OpenAI Responses over the fake engine: the stream lifecycle, items and ids, the
terminal events, errors, and stored, chained and listed responses."""

from __future__ import annotations

import json

import httpx
import pytest

from parlance.core.errors import EngineFailure
from parlance.core.events import Failed, Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import Generated
from tests.support.fake_app import make_app
from tests.support.openresponses import check_response
from tests.support.openresponses import checked_events as events
from tests.support.transcripts import assert_transcript

RESPONSES = "/v1/responses"
HELLO = {"model": "fake-model", "input": "Hello!"}
WEATHER = {"type": "function", "name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}


async def test_text_stream_lifecycle(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hel"), TextDelta("lo"), Finish(FinishReason.STOP),
                        Usage(5, 2, 0.01, 0.02))
    response = await client.post(RESPONSES, json={**HELLO, "stream": True})
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["cache-control"] == "no-cache"
    frames = events(response.text)
    assert frames[-1] == ("", "[DONE]")
    names = [name for name, _ in frames[:-1]]
    assert names == ["response.created", "response.in_progress", "response.output_item.added",
                     "response.content_part.added", "response.output_text.delta",
                     "response.output_text.delta", "response.output_text.done",
                     "response.content_part.done", "response.output_item.done",
                     "response.completed"]
    datas = [data for _, data in frames[:-1]]
    assert [d["sequence_number"] for d in datas] == list(range(len(datas)))
    assert all(d["type"] == name for name, d in frames[:-1])
    created = datas[0]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    assert created["id"].startswith("resp_") and created["usage"] is None
    item = datas[2]["item"]
    assert item["id"].startswith("msg_") and item["status"] == "in_progress"
    assert datas[6]["text"] == "Hello"
    done = datas[-1]["response"]
    assert done["status"] == "completed" and done["output"][0]["content"][0]["text"] == "Hello"
    assert done["usage"]["input_tokens"] == 5 and done["usage"]["output_tokens"] == 2


async def test_output_cap_ends_incomplete(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hi"), Finish(FinishReason.LENGTH), Usage(5, 16))
    frames = events((await client.post(RESPONSES, json={**HELLO, "stream": True,
                                                        "max_output_tokens": 16})).text)
    name, data = frames[-2]
    assert name == "response.incomplete"
    assert data["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert frames[-3][1]["item"]["status"] == "incomplete"
    body = (await client.post(RESPONSES, json={**HELLO, "max_output_tokens": 16})).json()
    assert body["status"] in ("completed", "incomplete")


async def test_function_call_stream(client, fake_engine):
    fake_engine.enqueue(Generated("<think>Need the weather.</think>"),
                        Generated('<tool_call>{"name": "get_weather", "arguments": {"ci'),
                        Generated('ty": "Paris"}}</tool_call>'), Finish(FinishReason.STOP),
                        Usage(5, 20, reasoning_tokens=6))
    frames = events((await client.post(RESPONSES, json={**HELLO, "stream": True,
                                                        "tools": [WEATHER]})).text)
    by_name = {}
    for name, data in frames[:-1]:
        by_name.setdefault(name, []).append(data)
    reasoning, call = [d["item"] for d in by_name["response.output_item.done"]]
    assert reasoning["type"] == "reasoning" and reasoning["id"].startswith("rs_")
    assert reasoning["content"] == [{"type": "reasoning_text", "text": "Need the weather."}]
    assert call["type"] == "function_call" and call["id"].startswith("fc_")
    assert call["call_id"].startswith("call_") and call["call_id"] != call["id"]
    assert json.loads(call["arguments"]) == {"city": "Paris"}
    added = by_name["response.output_item.added"]
    assert [a["output_index"] for a in added] == [0, 1]
    assert added[1]["item"]["arguments"] == ""
    deltas = by_name["response.function_call_arguments.delta"]
    assert all(d["item_id"] == call["id"] and d["output_index"] == 1 for d in deltas)
    [args_done] = by_name["response.function_call_arguments.done"]
    assert args_done["name"] == "get_weather" and args_done["arguments"] == call["arguments"]
    final = by_name["response.completed"][0]["response"]
    assert final["usage"]["output_tokens_details"] == {"reasoning_tokens": 6}


async def test_engine_failure_is_response_failed_then_done(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hi"), Failed(EngineFailure("llama_decode failed")))
    frames = events((await client.post(RESPONSES, json={**HELLO, "stream": True})).text)
    name, data = frames[-2]
    assert name == "response.failed" and frames[-1] == ("", "[DONE]")
    assert data["response"]["status"] == "failed"
    assert data["response"]["error"]["code"] == "engine_error"
    assert sum(n in ("response.completed", "response.failed", "response.incomplete")
               for n, _ in frames) == 1


async def test_timeout_is_response_failed_request_timeout(fake_engine):
    fake_engine.enqueue(TextDelta("Hi"), 5.0, TextDelta("late"), Finish(FinishReason.STOP))
    transport = httpx.ASGITransport(app=make_app(fake_engine, request_timeout=0.2))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        frames = events((await client.post(RESPONSES, json={**HELLO, "stream": True})).text)
        name, data = frames[-2]
        assert name == "response.failed"
        assert data["response"]["error"]["code"] == "request_timeout"
        stored = (await client.get(f"{RESPONSES}/{data['response']['id']}")).json()
        assert stored["status"] == "failed"


async def test_stored_response_chain_and_listing(client, fake_engine):
    fake_engine.enqueue(TextDelta("Paris."), Finish(FinishReason.STOP), Usage(5, 1))
    first = (await client.post(RESPONSES, json={**HELLO, "input": "Capital of France?",
                                                "instructions": "Be brief."})).json()
    got = (await client.get(f"{RESPONSES}/{first['id']}")).json()
    assert got == first
    await client.post(RESPONSES, json={**HELLO, "input": "And of Italy?",
                                       "previous_response_id": first["id"]})
    messages = fake_engine.requests[-1].prompts[0].messages
    assert [(m.role, m.content) for m in messages] == [
        ("user", "Capital of France?"), ("assistant", "Paris."), ("user", "And of Italy?")]
    second_id = (await client.post(RESPONSES, json={
        **HELLO, "input": "x", "previous_response_id": first["id"]})).json()["id"]
    items = (await client.get(f"{RESPONSES}/{second_id}/input_items")).json()
    assert items["object"] == "list"
    texts = [i["content"] if isinstance(i["content"], str) else i["content"][0]["text"]
             for i in items["data"]]
    assert texts == ["x", "Paris.", "Capital of France?"]  # newest first
    assert all(i["id"] for i in items["data"]) and items["has_more"] is False
    asc = (await client.get(f"{RESPONSES}/{second_id}/input_items",
                            params={"order": "asc", "limit": 1})).json()
    assert asc["has_more"] is True and asc["first_id"] == asc["last_id"]
    after = (await client.get(f"{RESPONSES}/{second_id}/input_items",
                              params={"order": "asc", "after": asc["last_id"]})).json()
    assert len(after["data"]) == 2


async def test_delete_and_store_false(client, fake_engine):
    body = (await client.post(RESPONSES, json=HELLO)).json()
    deleted = await client.delete(f"{RESPONSES}/{body['id']}")
    assert deleted.json() == {"id": body["id"], "object": "response", "deleted": True}
    assert (await client.get(f"{RESPONSES}/{body['id']}")).status_code == 404
    unstored = (await client.post(RESPONSES, json={**HELLO, "store": False})).json()
    missing = await client.get(f"{RESPONSES}/{unstored['id']}")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == \
        "invalid_request_error"


async def test_unknown_previous_response_is_400(client):
    response = await client.post(RESPONSES, json={**HELLO, "previous_response_id": "resp_nope"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "previous_response_not_found"
    assert error["param"] == "previous_response_id"


async def test_stream_replay_starting_after(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hi"), Finish(FinishReason.STOP), Usage(5, 1))
    body = (await client.post(RESPONSES, json=HELLO)).json()
    frames = events((await client.get(f"{RESPONSES}/{body['id']}",
                                      params={"stream": "true", "starting_after": 3})).text)
    assert [d["sequence_number"] for _, d in frames[:-1]] == [4, 5, 6, 7, 8]
    assert frames[-2][1]["response"] == body and frames[-1] == ("", "[DONE]")


async def test_input_tokens(client):
    response = await client.post(f"{RESPONSES}/input_tokens",
                                 json={"model": "fake-model", "input": "one two three"})
    assert response.json() == {"object": "response.input_tokens", "input_tokens": 3}


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "fake-model"}, "input"),
    ({**HELLO, "max_output_tokens": 0}, "max_output_tokens"),
    ({**HELLO, "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
    ({**HELLO, "metadata": {"k": "v" * 513}}, "metadata"),
    ({**HELLO, "tools": [{"type": "function", "name": "f", "parameters": {"type": "strin"}}]},
     "tools[0].parameters"),
    ({**HELLO, "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({**HELLO, "text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name"),
    ({**HELLO, "input": [{"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": "http://x"}]}]}, "input[0].content[0]"),
    ({**HELLO, "input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ({**HELLO, "background": True, "store": False}, "background"),
    ({**HELLO, "previous_response_id": "chat_1"}, "previous_response_id"),
    ({**HELLO, "reasoning": {"effort": "extreme"}}, "reasoning.effort"),
])
async def test_invalid_requests_are_400_before_any_byte(client, body, param):
    for stream in (False, True):
        response = await client.post(RESPONSES, json={**body, "stream": stream})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == param


@pytest.mark.parametrize(("name", "script", "extra"), [
    ("text", [Generated("Hello"), Generated(" there!"), Finish(FinishReason.STOP),
              Usage(5, 2, 0.01, 0.02)], {}),
    ("cap_hit", [Generated("Once upon"), Finish(FinishReason.LENGTH), Usage(5, 16)],
     {"max_output_tokens": 16}),
    ("function_call", [Generated('<tool_call>{"name": "get_weather", "arguments": {"city": '),
                       Generated('"Paris"}}</tool_call>'), Finish(FinishReason.STOP),
                       Usage(5, 9)], {"tools": [WEATHER]}),
    ("reasoning", [Generated("<think>The user says hi."), Generated("</think>Hi!"),
                   Finish(FinishReason.STOP), Usage(5, 9, reasoning_tokens=6)], {}),
    ("failure", [Generated("Hi"), Failed(EngineFailure("llama_decode failed"))], {}),
])
async def test_canonical_sequences_golden(client, fake_engine, fixed_ids, name, script, extra):
    fake_engine.enqueue(*script)
    response = await client.post(RESPONSES, json={**HELLO, **extra, "stream": True})
    events(response.text)
    assert_transcript(f"responses_{name}.sse", response.text)


async def test_timeout_golden(fake_engine, fixed_ids):
    # "Hi" must come before the deadline even on a busy machine; the pause only ends
    # when the deadline cancels it
    fake_engine.enqueue(Generated("Hi"), 3600.0, Generated("late"), Finish(FinishReason.STOP))
    transport = httpx.ASGITransport(app=make_app(fake_engine, request_timeout=2.0))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.post(RESPONSES, json={**HELLO, "stream": True})
    events(response.text)
    assert_transcript("responses_timeout.sse", response.text)


async def test_non_stream_bodies_follow_the_specification(client, fake_engine):
    fake_engine.enqueue(Generated("<think>Hmm.</think>Hi"), Finish(FinishReason.STOP),
                        Usage(5, 3, reasoning_tokens=2))
    body = (await client.post(RESPONSES, json=HELLO)).json()
    check_response(body)
    assert [i["type"] for i in body["output"]] == ["reasoning", "message"]


async def test_restart_keeps_stored_responses(tmp_path):
    from parlance.engines.fake import FakeEngine

    async def client_for(engine):
        app = make_app(engine, data_dir=tmp_path)
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")

    engine = FakeEngine()
    engine.enqueue(TextDelta("Paris."), Finish(FinishReason.STOP), Usage(5, 1))
    async with await client_for(engine) as before:
        first = (await before.post(RESPONSES, json={**HELLO, "input": "Capital?"})).json()
    assert (tmp_path / "responses.sqlite3").exists()
    engine = FakeEngine()
    async with await client_for(engine) as after:  # a new app over the same data dir
        assert (await after.get(f"{RESPONSES}/{first['id']}")).json() == first
        chained = await after.post(RESPONSES, json={**HELLO, "input": "Why?",
                                                    "previous_response_id": first["id"]})
        assert chained.status_code == 200
    assert [m.content for m in engine.requests[-1].prompts[0].messages] == [
        "Capital?", "Paris.", "Why?"]


async def test_truncation_auto_drops_the_oldest_turns():
    from parlance.engines.fake import FakeEngine

    engine = FakeEngine(context_length=8)
    transport = httpx.ASGITransport(app=make_app(engine))
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        long_turns = [{"role": "user", "content": "one two three four five"},
                      {"role": "assistant", "content": "six seven eight nine"},
                      {"role": "user", "content": "ten eleven"}]
        refused = await client.post(RESPONSES, json={**HELLO, "input": long_turns})
        assert refused.status_code == 400  # Chat Completions' is 403
        assert refused.json()["error"] == {
            "message": refused.json()["error"]["message"], "type": "invalid_request_error",
            "param": "input", "code": "context_length_exceeded"}
        kept = await client.post(RESPONSES, json={**HELLO, "input": long_turns,
                                                  "truncation": "auto"})
        assert kept.status_code == 200, kept.text
    assert [m.content for m in engine.requests[-1].prompts[0].messages] == ["ten eleven"]


async def test_logprobs_with_include(client, fake_engine):
    from parlance.core.events import TokenLogprob, TopLogprob

    lp = TokenLogprob("Hi", -0.5, (72, 105), (TopLogprob("Hey", -1.5, (72, 101, 121)),))
    fake_engine.enqueue(TextDelta("Hi", logprobs=(lp,)), Finish(FinishReason.STOP), Usage(5, 1))
    frames = events((await client.post(RESPONSES, json={
        **HELLO, "stream": True, "top_logprobs": 1,
        "include": ["message.output_text.logprobs"]})).text)
    delta = next(d for n, d in frames if n == "response.output_text.delta")
    assert delta["logprobs"] == [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105],
                                  "top_logprobs": [{"token": "Hey", "logprob": -1.5,
                                                    "bytes": [72, 101, 121]}]}]
    assert fake_engine.requests[-1].logprobs == 1
    final = frames[-2][1]["response"]
    assert final["output"][0]["content"][0]["logprobs"] == delta["logprobs"]


async def test_auto_tool_choice_with_no_tools_is_no_tool(client, fake_engine):
    """Codex's compaction turn: `tools: []` with `tool_choice: "auto"` (issue 39)."""
    for stream in (False, True):
        fake_engine.enqueue(TextDelta("Summary."), Finish(FinishReason.STOP), Usage(5, 1))
        response = await client.post(RESPONSES, json={**HELLO, "tools": [],
                                                      "tool_choice": "auto", "stream": stream})
        assert response.status_code == 200, response.text
        assert fake_engine.requests[-1].tool_choice.mode == "none"
    required = await client.post(RESPONSES, json={**HELLO, "tools": [],
                                                  "tool_choice": "required"})
    assert required.status_code == 400 and required.json()["error"]["param"] == "tool_choice"


async def test_a_stream_deleted_while_it_runs_stays_deleted():
    """Issue 39: DELETE during the stream answered 404, and the response was stored
    anyway once the stream ended. It is retrievable (in progress) and deletable while
    it runs, and a deleted one is not stored when it ends."""
    import asyncio

    from parlance.engines.fake import FakeEngine
    from tests.support.live_server import serving

    engine = FakeEngine()
    gate = asyncio.Event()
    engine.enqueue(TextDelta("Hel"), gate, TextDelta("lo"), Finish(FinishReason.STOP),
                   Usage(5, 2))
    async with serving(make_app(engine)) as host, httpx.AsyncClient(
            base_url=f"http://{host}", timeout=60) as http:
        async with http.stream("POST", RESPONSES, json={**HELLO, "stream": True}) as stream:
            lines = stream.aiter_lines()
            created = None
            async for line in lines:
                if line.startswith("data: ") and '"response.created"' in line:
                    created = json.loads(line[6:])["response"]
                    break
            assert created is not None
            running = await http.get(f"{RESPONSES}/{created['id']}")
            assert running.status_code == 200
            assert running.json()["status"] == "in_progress"
            deleted = await http.delete(f"{RESPONSES}/{created['id']}")
            assert deleted.json() == {"id": created["id"], "object": "response",
                                      "deleted": True}
            gate.set()
            rest = [line async for line in lines]
        assert any('"response.completed"' in line for line in rest)  # the stream goes on
        assert (await http.get(f"{RESPONSES}/{created['id']}")).status_code == 404
        # one not deleted is stored as it ended
        engine.enqueue(TextDelta("Hi"), Finish(FinishReason.STOP), Usage(5, 1))
        done = events((await http.post(RESPONSES, json={**HELLO, "stream": True})).text)
        final = done[-2][1]["response"]
        stored = (await http.get(f"{RESPONSES}/{final['id']}")).json()
        assert stored["status"] == "completed" and stored == final
