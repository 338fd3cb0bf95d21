"""Gemini's API through the app on the fake engine: the model methods under `/v1beta`
and `/v1`, the stream as SSE (`alt=sse`) or one JSON array, token counts, embeddings,
the model list, API keys in `x-goog-api-key` or `?key=`, and every refusal in Google's
envelope (also those made before an endpoint runs)."""

from __future__ import annotations

import json

import pytest

from parlance.core.events import (
    Finish,
    FinishReason,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from parlance.core.tools import ToolChoice
from parlance.engines.fake import FakeEngine
from tests.support.fake_app import make_app
from tests.support.real_engine import asgi_client

GENERATE = "/v1beta/models/fake-model:generateContent"
STREAM = "/v1beta/models/fake-model:streamGenerateContent"
HELLO = {"contents": [{"role": "user", "parts": [{"text": "Hello!"}]}]}


def _google_error(response, code: int, status: str) -> dict:
    assert response.status_code == code, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert error["code"] == code and error["status"] == status and error["message"]
    return error


async def test_generate_content(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hi"), TextDelta(" there"), Finish(FinishReason.STOP),
                        Usage(6, 2))
    answer = (await client.post(GENERATE, json=HELLO)).json()
    assert answer["candidates"] == [{"content": {"role": "model", "parts": [
        {"text": "Hi there"}]}, "finishReason": "STOP", "index": 0}]
    assert answer["usageMetadata"]["totalTokenCount"] == 8
    assert answer["modelVersion"] == "fake-model"


async def test_v1_serves_the_same_methods(client, fake_engine):
    response = await client.post("/v1/models/fake-model:generateContent", json=HELLO)
    assert response.status_code == 200, response.text
    assert fake_engine.requests[-1].model == "fake-model"


async def test_stream_as_sse_with_alt_sse(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hi"), TextDelta("!"), Finish(FinishReason.STOP), Usage(6, 2))
    response = await client.post(STREAM + "?alt=sse", json=HELLO)
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    chunks = [json.loads(line.removeprefix("data: "))
              for line in response.text.split("\n\n") if line]
    text = "".join(p["text"] for c in chunks for p in c["candidates"][0]["content"]["parts"])
    assert text == "Hi!"
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"


async def test_stream_as_one_json_array_without_alt(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hi"), TextDelta("!"), Finish(FinishReason.STOP), Usage(6, 2))
    response = await client.post(STREAM, json=HELLO)
    assert response.headers["content-type"] == "application/json; charset=utf-8"
    chunks = response.json()
    assert isinstance(chunks, list) and chunks[-1]["candidates"][0]["finishReason"] == "STOP"


async def test_a_forced_call_is_the_neutral_forced_choice(client, fake_engine):
    fake_engine.enqueue(ToolCallStart("call_1", "get_weather"), ToolCallArgs("{}"),
                        ToolCallEnd(), Finish(FinishReason.TOOL_CALLS), Usage(6, 3))
    body = {**HELLO, "tools": [{"functionDeclarations": [{"name": "get_weather",
                                                          "parameters": {"type": "OBJECT"}}]}],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY"}}}
    answer = (await client.post(GENERATE, json=body)).json()
    assert fake_engine.requests[-1].tool_choice == ToolChoice("named", "get_weather")
    assert answer["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"id": "call_1", "name": "get_weather", "args": {}}}]
    assert answer["candidates"][0]["finishReason"] == "STOP"


async def test_count_tokens(client):
    for path in ("/v1beta/models/fake-model:countTokens", "/v1/models/fake-model:countTokens"):
        answer = (await client.post(path, json=HELLO)).json()
        assert answer["totalTokens"] >= 1, path


async def test_embeddings_one_and_a_batch(client):
    one = (await client.post("/v1beta/models/fake-model:embedContent", json={
        "content": {"parts": [{"text": "hello world"}]}, "outputDimensionality": 4})).json()
    assert len(one["embedding"]["values"]) == 4
    batch = (await client.post("/v1beta/models/fake-model:batchEmbedContents", json={
        "requests": [{"model": "models/fake-model", "content": {"parts": [{"text": "a"}]}},
                     {"content": {"parts": [{"text": "b"}]}}]})).json()
    assert [len(e["values"]) for e in batch["embeddings"]] == [8, 8]


async def test_the_model_list_and_a_model(client):
    listed = (await client.get("/v1beta/models")).json()
    assert [m["name"] for m in listed["models"]] == ["models/fake-model"]
    assert "generateContent" in listed["models"][0]["supportedGenerationMethods"]
    one = (await client.get("/v1beta/models/fake-model")).json()
    assert one["name"] == "models/fake-model"
    _google_error(await client.get("/v1beta/models/no-such-model"), 404, "NOT_FOUND")


async def test_refusals_are_in_googles_envelope(client):
    _google_error(await client.post("/v1beta/models/no-such-model:generateContent",
                                    json=HELLO), 404, "NOT_FOUND")
    error = _google_error(await client.post(GENERATE, json={"contents": []}), 400,
                          "INVALID_ARGUMENT")
    assert "contents" in error["message"]
    _google_error(await client.post(GENERATE, content=b"{"), 400, "INVALID_ARGUMENT")
    _google_error(await client.post("/v1beta/nothing/here", json={}), 404, "NOT_FOUND")
    _google_error(await client.post("/v1/models/fake-model:generateContent",
                                    json={"contents": "no"}), 400, "INVALID_ARGUMENT")


@pytest.mark.parametrize("where", ["header", "query", "bearer"])
async def test_the_key_may_come_where_geminis_clients_send_it(where):
    app = make_app(FakeEngine(), api_keys=("sk-test",))
    headers = {"header": {"x-goog-api-key": "sk-test"},
               "bearer": {"authorization": "Bearer sk-test"}}.get(where, {})
    query = "?key=sk-test" if where == "query" else ""
    async with asgi_client(app) as http:
        _google_error(await http.post(GENERATE, json=HELLO), 401, "UNAUTHENTICATED")
        _google_error(await http.post(GENERATE, json=HELLO,
                                      headers={"x-goog-api-key": "wrong"}), 401,
                      "UNAUTHENTICATED")
        response = await http.post(GENERATE + query, json=HELLO, headers=headers)
        assert response.status_code == 200, response.text
        # `?key=` is Gemini's: another API's path does not read it
        other = await http.post("/v1/chat/completions?key=sk-test", json={
            "model": "fake-model", "messages": [{"role": "user", "content": "Hi"}]})
        assert other.status_code == 401


async def test_the_shared_v1_model_list_is_geminis_for_googles_clients(client):
    """The Python SDK asks `GET /v1/models`, which is OpenAI's: its headers say whose."""
    google = {"x-goog-api-client": "google-genai-sdk/3.6.1 gl-python/3.11"}
    listed = (await client.get("/v1/models", headers=google)).json()
    assert [m["name"] for m in listed["models"]] == ["models/fake-model"]
    one = (await client.get("/v1/models/fake-model", headers={"x-goog-api-key": "k"})).json()
    assert one["name"] == "models/fake-model"
    _google_error(await client.get("/v1/models/nope", headers=google), 404, "NOT_FOUND")
    assert (await client.get("/v1/models")).json()["object"] == "list"  # OpenAI's
