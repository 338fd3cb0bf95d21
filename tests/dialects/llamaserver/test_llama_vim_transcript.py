"""What llama.vim really sends to /infill, replayed byte for byte (fake engine): its
requests were captured from the plugin itself (tests/data/llama_vim/infill_requests.json
says how), so a field it sends that this server misreads, or a response field it reads
that this server does not give, fails here.

Both kinds llama.vim sends: a completion at the cursor (`response_fields` naming every
value its info line shows), and the ring's background update (`n_predict: 0`, file
chunks in `input_extra` with a `time` field, `response_fields: [""]`) whose only use is
to get those chunks evaluated into the cache. Its empty `Authorization: Bearer ` (the
plugin tests the length of the key's name, not of the key) must not be a refusal on a
server without keys."""

from __future__ import annotations

import json
from pathlib import Path

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.core.request import ExtraFile

TRANSCRIPT = Path(__file__).parents[2] / "data" / "llama_vim" / "infill_requests.json"
CAPTURED = json.loads(TRANSCRIPT.read_text())["requests"]


async def replay(client, captured: dict):
    return await client.request(captured["method"], captured["path"],
                                content=captured["body"].encode(),
                                headers=captured["headers"])


async def test_a_completion_at_the_cursor(client, fake_engine):
    captured = CAPTURED[0]
    sent = json.loads(captured["body"])
    fake_engine.enqueue(TextDelta("    return a + b"), Finish(FinishReason.STOP),
                        Usage(prompt_tokens=20, completion_tokens=5, cached_tokens=4))
    response = await replay(client, captured)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == set(sent["response_fields"])  # every field the plugin reads
    assert body["content"] == "    return a + b" and body["truncated"] is False
    assert (body["timings/prompt_n"], body["timings/predicted_n"]) == (16, 5)
    assert body["tokens_cached"] == 4
    (prompt,) = fake_engine.requests[-1].prompts
    assert prompt.infill and prompt.text == sent["input_prefix"]
    assert prompt.suffix == sent["input_suffix"] and prompt.cursor == sent["prompt"]
    assert fake_engine.requests[-1].max_tokens == sent["n_predict"]


async def test_the_rings_background_update(client, fake_engine):
    captured = CAPTURED[1]
    sent = json.loads(captured["body"])
    assert sent["n_predict"] == 0 and sent["input_extra"][0]["time"]
    fake_engine.enqueue(Finish(FinishReason.LENGTH), Usage(prompt_tokens=30,
                                                            completion_tokens=0))
    response = await replay(client, captured)
    assert response.status_code == 200, response.text
    assert response.json() == {}  # no field is named ""
    (prompt,) = fake_engine.requests[-1].prompts
    (chunk,) = sent["input_extra"]
    assert prompt.extra == (ExtraFile(chunk["text"], chunk["filename"]),)
