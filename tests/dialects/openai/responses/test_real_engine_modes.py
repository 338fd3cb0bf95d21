"""WebSocket mode, background responses and compaction on the REAL engine (SmolLM2-135M,
greedy) over a loopback server: each agrees with a plain HTTP response where greedy
decoding makes them comparable, and every event and object passes the oracles."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import httpx
import pytest
from openresponses_types import types as spec
from websockets.asyncio.client import connect

from tests.support.live_server import serving
from tests.support.openresponses import check_response
from tests.support.real_engine import MODEL_ID, make_app, never_ending, wait_idle
from tests.support.responses_socket import response

pytestmark = pytest.mark.model

PATIENCE = 120.0  # generous: SmolLM2 on a busy machine
ASK = {"model": MODEL_ID, "temperature": 0, "max_output_tokens": 40}


@pytest.fixture
def answering(llama):
    """Meanwhile no answer ends before its max_output_tokens: never an empty one."""
    with never_ending(llama):
        yield


def output_text(body: dict[str, Any]) -> str:
    return "".join(part["text"] for item in body["output"] if item["type"] == "message"
                   for part in item["content"])


async def test_websocket_turns_agree_with_http(llama, answering):
    async with serving(make_app(llama)) as host:
        async with httpx.AsyncClient(base_url=f"http://{host}", timeout=PATIENCE) as http:
            plain = (await http.post("/v1/responses", json={
                **ASK, "input": "My name is Ada."})).json()
        async with connect(f"ws://{host}/v1/responses") as ws:
            first = await response(ws, {"type": "response.create", **ASK, "store": False,
                                        "input": "My name is Ada."})
            done = first[-1]["response"]
            assert done["status"] == plain["status"] and output_text(done)
            assert output_text(done) == output_text(plain)
            second = await response(ws, {"type": "response.create", **ASK, "store": False,
                                         "input": "What is my name?",
                                         "previous_response_id": done["id"]})
            usage = second[-1]["response"]["usage"]
        await wait_idle(llama, PATIENCE)
    assert usage["input_tokens"] > done["usage"]["input_tokens"] + done["usage"]["output_tokens"]


async def test_background_agrees_with_foreground_and_replays_its_stream(llama, answering):
    ask = {**ASK, "input": "Write a haiku about the sea."}
    async with serving(make_app(llama)) as host, httpx.AsyncClient(
            base_url=f"http://{host}", timeout=PATIENCE) as http:
        foreground = (await http.post("/v1/responses", json=ask)).json()
        created = (await http.post("/v1/responses", json={**ask, "background": True})).json()
        assert created["status"] in ("queued", "in_progress")
        for _ in range(int(PATIENCE / 0.05)):
            polled = (await http.get(f"/v1/responses/{created['id']}")).json()
            if polled["status"] not in ("queued", "in_progress"):
                break
            await asyncio.sleep(0.05)
        check_response(polled)
        stream = (await http.get(f"/v1/responses/{created['id']}?stream=true")).text
        await wait_idle(llama, PATIENCE)
    assert polled["status"] == foreground["status"]
    assert output_text(polled) == output_text(foreground) and output_text(polled)
    deltas = [json.loads(line[6:]) for line in stream.splitlines()
              if line.startswith("data: {")]
    assert [d["type"] for d in deltas[:3]] == [
        "response.created", "response.queued", "response.in_progress"]
    assert "".join(d["delta"] for d in deltas
                   if d["type"] == "response.output_text.delta") == output_text(polled)


async def test_compaction_summarises_and_the_summary_carries_the_conversation(llama):
    # A summary may take up to SUMMARY_MAX_TOKENS (SmolLM2 rarely stops sooner): many
    # times a turn of this suite, on a machine shared with other work
    patience = 8 * PATIENCE
    app = make_app(llama, request_timeout=patience)
    async with serving(app) as host, httpx.AsyncClient(base_url=f"http://{host}",
                                                       timeout=patience) as http:
        first = (await http.post("/v1/responses", json={
            **ASK, "input": "My name is Ada and I live in Oslo."})).json()
        compacted = (await http.post("/v1/responses/compact", json={
            "model": MODEL_ID, "previous_response_id": first["id"]})).json()
        spec.CompactResource.model_validate_json(json.dumps(compacted), strict=True)
        *users, item = compacted["output"]
        assert [u["role"] for u in users] == ["user"] and item["type"] == "compaction"
        # authenticated, not encrypted: the payload is readable JSON after the 32-byte tag
        summary = json.loads(base64.urlsafe_b64decode(item["encrypted_content"])[32:])["v"]
        assert summary.strip()
        later = (await http.post("/v1/responses", json={
            **ASK, "store": False,
            "input": [*compacted["output"], {"role": "user", "content": "Where do I live?"}]}
        )).json()
        await wait_idle(llama, PATIENCE)
    check_response(later)
    assert later["status"] in ("completed", "incomplete") and output_text(later)
    # the model read the summary: more prompt than the question and the first message
    assert later["usage"]["input_tokens"] > first["usage"]["input_tokens"] + 5
