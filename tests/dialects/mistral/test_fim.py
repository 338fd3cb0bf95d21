"""Mistral's /v1/fim/completions over HTTP (fake engine): the SDK's response and chunk
shapes, suffix absent as a plain completion, the refusals in Mistral's envelope."""

from __future__ import annotations

import json

from parlance.core.events import Finish, FinishReason, TextDelta, Usage

REQUEST = {"model": "fake-model", "prompt": "def fibonacci(n):", "suffix": "return result",
           "max_tokens": 64, "stop": ["\n\n"], "temperature": 0, "random_seed": 7}


async def test_the_answer(client, fake_engine):
    fake_engine.enqueue(TextDelta("\n    a, b = 0, 1\n    "), Finish(FinishReason.STOP),
                        Usage(prompt_tokens=12, completion_tokens=9))
    response = await client.post("/v1/fim/completions", json=REQUEST)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == "fake-model"
    assert body["choices"] == [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": "\n    a, b = 0, 1\n    "}}]
    assert body["usage"] == {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21}
    request = fake_engine.requests[-1]
    (prompt,) = request.prompts
    assert (prompt.text, prompt.suffix, prompt.infill) == ("def fibonacci(n):",
                                                           "return result", False)
    assert request.stop == ("\n\n",) and request.sampling.seed == 7
    assert request.sampling.temperature == 0 and request.max_tokens == 64


async def test_the_stream(client, fake_engine):
    fake_engine.enqueue(TextDelta("a"), TextDelta("b"), Finish(FinishReason.LENGTH),
                        Usage(prompt_tokens=3, completion_tokens=2))
    response = await client.post("/v1/fim/completions", json={**REQUEST, "stream": True})
    lines = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == "ab"
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["usage"]["total_tokens"] == 5


async def test_without_suffix_a_plain_completion(client, fake_engine):
    await client.post("/fim/completions", json={"model": "fake-model", "prompt": "x = "})
    (prompt,) = fake_engine.requests[-1].prompts
    assert prompt.text == "x = " and prompt.suffix is None


async def test_refusals_in_mistrals_envelope(client):
    response = await client.post("/v1/fim/completions", json={**REQUEST, "min_tokens": 5})
    assert response.status_code == 400
    body = response.json()
    assert body["object"] == "error" and body["param"] == "min_tokens"
    assert body["type"] == "invalid_request_error"
    missing = await client.post("/v1/fim/completions", json={"model": "fake-model"})
    assert missing.status_code == 400 and missing.json()["param"] == "prompt"
