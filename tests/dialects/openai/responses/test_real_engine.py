"""The Responses API on the REAL engine (SmolLM2-135M, greedy) through the official
openai SDK with strict validation, every event and object also checked against
the Open Responses specification; a client that leaves mid-stream; and a prompt longer
than one batch reporting its evaluation, chunk by chunk, to a client that asked."""

from __future__ import annotations

import json
import secrets

import httpx
import openai
import pytest

from parlance.dialects.openai.responses.stream import PROMPT_PROGRESS
from parlance.engines.llamacpp.model import ContextSettings
from tests.support.live_server import ServerThread
from tests.support.openresponses import check_response, checked_events
from tests.support.real_engine import (
    MODEL_ID,
    PATIENCE,
    asgi_client,
    local_engine_only,
    make_app,
    never_ending,
    wait_idle,
)
from tests.support.sse import sse_data

pytestmark = pytest.mark.model

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string",
                                                                   "maxLength": 40}},
                          "required": ["city"]}}
# Two valid answers: the grammar ends the response a few tokens in, whatever the model says.
CLEAR_SKY = {"format": {"type": "json_schema", "name": "sky", "strict": True, "schema": {
    "type": "object", "properties": {"clear": {"type": "boolean"}}, "required": ["clear"],
    "additionalProperties": False}}}


@pytest.fixture
def sdk(llama):
    return openai.AsyncOpenAI(base_url="http://parlance.test/v1", api_key="unused",
                              http_client=asgi_client(make_app(llama)),
                              _strict_response_validation=True, max_retries=0)


async def test_create_stream_and_not_agree(sdk, llama):
    ask = {"model": MODEL_ID, "input": "Write a haiku about the sea.", "temperature": 0,
           "max_output_tokens": 60}
    with never_ending(llama):  # an answer of 60 tokens, never an empty one
        async with sdk:
            plain = await sdk.responses.create(**ask)
            events = [e async for e in await sdk.responses.create(**ask, stream=True)]
        async with asgi_client(make_app(llama)) as http:  # the raw bytes, for the specification
            check_response((await http.post("/v1/responses", json=ask)).json())
            raw = checked_events((await http.post("/v1/responses", json={
                **ask, "stream": True})).text)
    assert [name for name, _ in raw[:-1]] == [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert final.output_text == plain.output_text and plain.output_text
    assert final.status == plain.status and final.usage.output_tokens == plain.usage.output_tokens
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == plain.output_text


async def test_stream_helper_and_output_cap(sdk, llama):
    async with sdk:
        with never_ending(llama):
            async with sdk.responses.stream(model=MODEL_ID, input="Tell me a long story.",
                                            temperature=0, max_output_tokens=16) as stream:
                kinds = [e.type async for e in stream]
        assert kinds[-1] == "response.incomplete"
        # an answer that ends before the cap: its grammar is complete
        async with sdk.responses.stream(model=MODEL_ID, input="Is the sky clear?",
                                        temperature=0, max_output_tokens=200,
                                        text=CLEAR_SKY) as stream:
            final = await stream.get_final_response()
    assert final.status == "completed"
    assert json.loads(final.output_text) in ({"clear": True}, {"clear": False})


async def test_multi_turn_retrieve_list_delete(sdk):
    async with sdk:
        first = await sdk.responses.create(model=MODEL_ID, input="My name is Ada.",
                                           instructions="Answer in one sentence.",
                                           temperature=0, max_output_tokens=30)
        second = await sdk.responses.create(model=MODEL_ID, input="What is my name?",
                                            previous_response_id=first.id, temperature=0,
                                            max_output_tokens=30)
        assert second.usage.input_tokens > first.usage.input_tokens
        # the first turn's prompt was still in the engine's cache, and that is reported
        assert 0 < second.usage.input_tokens_details.cached_tokens < second.usage.input_tokens
        assert (await sdk.responses.retrieve(second.id)).output_text == second.output_text
        items = await sdk.responses.input_items.list(second.id, order="asc")
        assert [i.role for i in items.data] == ["user", "assistant", "user"]
        await sdk.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            await sdk.responses.retrieve(first.id)
        # the second response keeps its whole conversation: still chainable
        third = await sdk.responses.create(model=MODEL_ID, input="Thanks.", temperature=0,
                                           previous_response_id=second.id,
                                           max_output_tokens=16)
    assert third.usage.input_tokens > second.usage.input_tokens


async def test_function_call_round_trip(sdk, llama):
    async with sdk:
        first = await sdk.responses.create(model=MODEL_ID, input="What's the weather in Paris?",
                                           tools=[WEATHER], tool_choice="required",
                                           parallel_tool_calls=False, temperature=0,
                                           max_output_tokens=100)
        [call] = first.output
        assert call.type == "function_call" and call.name == "get_weather"
        assert isinstance(json.loads(call.arguments)["city"], str)
        with never_ending(llama):
            answer = await sdk.responses.create(
                model=MODEL_ID, previous_response_id=first.id, tools=[WEATHER],
                temperature=0, max_output_tokens=40,
                input=[{"type": "function_call_output", "call_id": call.call_id,
                        "output": "18 C and sunny"}])
    # the tool's output reached the model: the second prompt holds the first exchange
    assert answer.usage.input_tokens > first.usage.input_tokens
    # free to answer or to call again: prose runs to the cap, a call is valid
    assert answer.output
    for item in answer.output:
        assert item.type in ("message", "function_call"), item
        if item.type == "function_call":
            assert isinstance(json.loads(item.arguments)["city"], str)
    if answer.output[-1].type == "message":
        assert answer.output_text and answer.status == "incomplete"


async def test_client_leaving_mid_stream_stores_cancelled_and_frees_the_slot(llama):
    body = {"model": MODEL_ID, "input": "Tell me a long story.", "stream": True,
            "max_output_tokens": 2000, "temperature": 0}
    with ServerThread(make_app(llama)) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=PATIENCE) as http:
            with never_ending(llama):
                async with http.stream("POST", "/v1/responses", json=body) as response:
                    lines = response.aiter_lines()
                    response_id = None
                    deltas = 0
                    async for line in lines:
                        if line.startswith("data: {"):
                            data = json.loads(line[6:])
                            response_id = response_id or data.get("response", {}).get("id")
                            deltas += data["type"] == "response.output_text.delta"
                            if deltas == 3:
                                break
            await wait_idle(llama)
            stored = (await http.get(f"/v1/responses/{response_id}")).json()
    assert stored["status"] == "cancelled"
    check_response(stored)


@local_engine_only("an upstream reports a prompt's evaluation as 0 of 1, then 1 of 1")
async def test_a_prompt_longer_than_a_batch_reports_each_chunk_when_asked(llama):
    # Words nothing before used (no prefix of it is cached): several batches of tokens
    words = " ".join(secrets.token_hex(3) for _ in range(ContextSettings().n_batch))
    body = {"model": MODEL_ID, "input": f"Count these words: {words}", "stream": True,
            "max_output_tokens": 16, "temperature": 0}
    async with asgi_client(make_app(llama)) as http:
        answer = await http.post("/v1/responses", json=body,
                                 headers={"X-Parlance-Progress": "on"})
    assert answer.status_code == 200, answer.text[:500]
    events = [e for e in sse_data(answer.text) if e != "[DONE]"]
    steps = [(e["done"], e["total"]) for e in events if e["type"] == PROMPT_PROGRESS]
    total = events[-1]["response"]["usage"]["input_tokens"]
    assert len(steps) >= 2 and total > ContextSettings().n_batch
    assert {t for _, t in steps} == {total} and steps[-1][0] == total
    assert [d for d, _ in steps] == sorted({d for d, _ in steps})  # each chunk once, in order
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    checked_events("\n\n".join(b for b in answer.text.split("\n\n")
                                 if PROMPT_PROGRESS not in b))
