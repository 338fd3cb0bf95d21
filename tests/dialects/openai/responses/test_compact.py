"""`POST /v1/responses/compact` over the fake engine: the model summarises the
conversation into a sealed `compaction` item; a later request that sends the item
back continues from the summary. The Open Responses types (strict) and the openai
SDK's `responses.compact` are the oracles."""

from __future__ import annotations

import base64
import json

import httpx
import openai
import pytest
from openresponses_types import types as spec

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.dialects.openai.responses.compact import SUMMARISE, SUMMARY_MAX_TOKENS
from parlance.engines.fake import FakeEngine
from parlance.server.sealing import KEY_FILE
from tests.support.fake_app import make_app

COMPACT = "/v1/responses/compact"
SUMMARY = "Ada is planning a trip to Oslo and wants the weather."
CONVERSATION = [
    {"role": "user", "content": "I am Ada. I plan a trip to Oslo."},
    {"role": "assistant", "content": "Nice! How can I help?"},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather",
     "arguments": '{"city": "Oslo"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "4 C, rain"},
    {"role": "user", "content": "What should I pack?"},
]


def summary_script(text: str = SUMMARY) -> list:
    return [TextDelta(text), Finish(FinishReason.STOP), Usage(40, 12)]


def http(engine: FakeEngine, **settings: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=make_app(engine, **settings)),
                             base_url="http://t")


def check_compaction(body: dict) -> None:
    spec.CompactResource.model_validate_json(json.dumps(body), strict=True)


async def test_compact_then_continue_from_the_summary():
    engine = FakeEngine()
    engine.enqueue(*summary_script())
    async with http(engine) as client:
        response = await client.post(COMPACT, json={
            "model": "fake-model", "input": CONVERSATION, "instructions": "Be helpful."})
        assert response.status_code == 200, response.text
        body = response.json()
        check_compaction(body)
        assert body["object"] == "response.compaction"
        assert body["usage"]["input_tokens"] == 40 and body["usage"]["output_tokens"] == 12
        *users, item = body["output"]
        assert [u["content"][0]["text"] for u in users] == [
            "I am Ada. I plan a trip to Oslo.", "What should I pack?"]
        assert item["type"] == "compaction" and item["id"].startswith("cmp_")
        seen = engine.requests[-1].prompts[0].messages
        assert seen[0].role == "system" and seen[0].content == "Be helpful."
        assert seen[-1].role == "user" and seen[-1].content.startswith("Summarise")
        assert any(m.role == "tool" and m.content == "4 C, rain" for m in seen)
        assert engine.requests[-1].sampling.temperature == 0.0

        # The output goes back in place of the conversation it summarises.
        engine.enqueue(TextDelta("A raincoat."), Finish(FinishReason.STOP), Usage(9, 2))
        later = await client.post("/v1/responses", json={
            "model": "fake-model", "store": False,
            "input": [*body["output"], {"role": "user", "content": "And shoes?"}]})
        assert later.status_code == 200, later.text
        seen = engine.requests[-1].prompts[0].messages
        assert [m.role for m in seen] == ["user", "user", "assistant", "user"]
        assert seen[2].content.endswith(SUMMARY)
        assert SUMMARY not in item["encrypted_content"]  # opaque: no plain text on the wire

        # An altered item is refused, naming the item.
        raw = bytearray(base64.urlsafe_b64decode(item["encrypted_content"]))
        raw[-2] ^= 1
        forged = {**item, "encrypted_content": base64.urlsafe_b64encode(bytes(raw)).decode()}
        refused = await client.post("/v1/responses", json={
            "model": "fake-model", "input": [{"role": "user", "content": "Hi"}, forged]})
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "invalid_encrypted_content"
        assert refused.json()["error"]["param"] == "input[1].encrypted_content"


async def test_compact_a_stored_chain_and_compact_again():
    engine = FakeEngine()
    engine.enqueue(TextDelta("Hello Ada."), Finish(FinishReason.STOP), Usage(5, 2))
    engine.enqueue(*summary_script("First summary."))
    engine.enqueue(*summary_script("Second summary."))
    async with http(engine) as client:
        first = (await client.post("/v1/responses", json={
            "model": "fake-model", "input": "I am Ada."})).json()
        compacted = (await client.post(COMPACT, json={
            "model": "fake-model", "previous_response_id": first["id"],
            "input": "Remember that."})).json()
        check_compaction(compacted)
        seen = [m.content for m in engine.requests[-1].prompts[0].messages]
        assert seen[:3] == ["I am Ada.", "Hello Ada.", "Remember that."]
        # Compacting a compacted conversation: the earlier summary is read, and replaced.
        again = (await client.post(COMPACT, json={
            "model": "fake-model", "input": compacted["output"]})).json()
        check_compaction(again)
        seen = engine.requests[-1].prompts[0].messages
        assert seen[-2].content.endswith("First summary.")
        assert [i["type"] for i in again["output"]] == ["message", "message", "compaction"]
        missing = await client.post(COMPACT, json={
            "model": "fake-model", "previous_response_id": "resp_gone"})
        assert missing.status_code == 400
        assert missing.json()["error"]["code"] == "previous_response_not_found"


async def test_a_conversation_too_long_for_the_context_is_summarised_from_its_latest_turns():
    # Room for the summary's budget, the instruction to summarise and three words more.
    engine = FakeEngine(context_length=SUMMARY_MAX_TOKENS + len(SUMMARISE.split()) + 3)
    engine.enqueue(*summary_script())
    turns = [{"role": "user", "content": "one two three four five"},
             {"role": "assistant", "content": "six seven eight"},
             {"role": "user", "content": "nine ten"}]
    async with http(engine) as client:
        response = await client.post(COMPACT, json={"model": "fake-model", "input": turns})
    assert response.status_code == 200, response.text
    seen = [m.content for m in engine.requests[-1].prompts[0].messages]
    assert seen[0] == "nine ten"  # the oldest turn was left out of what the model read
    users = [i["content"][0]["text"] for i in response.json()["output"][:-1]]
    assert users == ["one two three four five", "nine ten"]  # but every user message is kept


@pytest.mark.parametrize(("body", "param"), [
    ({"input": "Hi"}, "model"),
    ({"model": "fake-model"}, "input"),
    ({"model": "fake-model", "input": []}, "input"),
    ({"model": "fake-model", "input": [{"type": "message", "role": "user", "content": [
        {"type": "input_image", "image_url": "http://x"}]}]}, "input[0].content[0]"),
    ({"model": "fake-model", "input": [{"type": "compaction", "encrypted_content": "x"}]},
     "input[0].encrypted_content"),
])
async def test_bad_requests_are_400(body, param):
    async with http(FakeEngine()) as client:
        response = await client.post(COMPACT, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


async def test_unknown_sub_paths_are_404():
    async with http(FakeEngine()) as client:
        for path in ("/v1/responses/compactify", "/v1/responses/resp_1/compact"):
            response = await client.post(path, json={"model": "fake-model"})
            assert response.status_code == 404, path
            assert response.json()["error"]["code"] == "unknown_url"


async def test_sealed_items_outlive_a_restart(tmp_path):
    engine = FakeEngine()
    engine.enqueue(*summary_script())
    async with http(engine, data_dir=tmp_path) as client:
        body = (await client.post(COMPACT, json={"model": "fake-model",
                                                 "input": CONVERSATION})).json()
    assert (tmp_path / KEY_FILE).exists()
    engine = FakeEngine()
    async with http(engine, data_dir=tmp_path) as client:  # a new app over the same data
        later = await client.post("/v1/responses", json={"model": "fake-model",
                                                         "input": body["output"]})
    assert later.status_code == 200, later.text
    assert engine.requests[-1].prompts[0].messages[-1].content.endswith(SUMMARY)


async def test_openai_sdk_compact():
    engine = FakeEngine()
    engine.enqueue(*summary_script())
    transport = httpx.ASGITransport(app=make_app(engine))
    # Not strict: the SDK's CompactedResponse types its output items as output items
    # (messages are assistant-only there), while its own documentation (and the Open
    # Responses specification, checked strictly above) says the output is every user
    # message followed by the compaction item, which is what OpenAI sends.
    client = openai.AsyncOpenAI(base_url="http://t/v1", api_key="k", max_retries=0,
                                http_client=httpx.AsyncClient(transport=transport))
    raw = await client.responses.with_raw_response.compact(model="fake-model",
                                                           input=CONVERSATION)
    compacted = raw.parse()
    assert compacted.object == "response.compaction"
    assert compacted.output[-1].type == "compaction"
    assert compacted.usage.total_tokens == 52
    engine.enqueue(TextDelta("Pack a raincoat."), Finish(FinishReason.STOP), Usage(9, 3))
    answer = await client.responses.create(
        model="fake-model", input=[*raw.http_response.json()["output"],
                                   {"role": "user", "content": "So?"}])
    assert answer.output_text == "Pack a raincoat."
