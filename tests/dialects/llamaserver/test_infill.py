"""llama-server's /infill over HTTP (fake engine): the fields llama.vim and llama.vscode
send, the /completion-shaped answer, response_fields, n_cmpl, the SSE stream."""

from __future__ import annotations

import json

import pytest

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from parlance.core.request import ExtraFile

# What llama.vim sends (autoload/llama.vim, as the shared reference transcribes it)
LLAMA_VIM = {
    "id_slot": 0, "input_prefix": "def add(a, b):\n", "input_suffix": "\n\nprint(add(1, 2))\n",
    "input_extra": [{"text": "import math\n", "filename": "util.py"}, {"text": "x = 1\n"}],
    "prompt": "    return ", "n_predict": 128, "stop": [], "n_indent": 4, "top_k": 40,
    "top_p": 0.90, "samplers": ["top_k", "top_p", "infill"], "stream": False,
    "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 250,
    "response_fields": ["content", "timings/prompt_n", "timings/predicted_n",
                        "tokens_cached", "truncated"],
    "model": ""}


async def test_llama_vims_request(client, fake_engine):
    fake_engine.enqueue(TextDelta("a + b"), Finish(FinishReason.STOP),
                        Usage(prompt_tokens=30, completion_tokens=3, cached_tokens=20))
    response = await client.post("/infill", json=LLAMA_VIM)
    assert response.status_code == 200, response.text
    assert response.json() == {"content": "a + b", "timings/prompt_n": 10,
                               "timings/predicted_n": 3, "tokens_cached": 20,
                               "truncated": False}
    request = fake_engine.requests[-1]
    (prompt,) = request.prompts
    assert prompt.infill and prompt.text == LLAMA_VIM["input_prefix"]
    assert prompt.suffix == LLAMA_VIM["input_suffix"] and prompt.cursor == "    return "
    assert prompt.extra == (ExtraFile("import math\n", "util.py"), ExtraFile("x = 1\n", "tmp"))
    assert request.max_tokens == 128 and request.sampling.top_k == 40


async def test_the_whole_completion_object(client, fake_engine):
    fake_engine.enqueue(TextDelta("x"), Finish(FinishReason.LENGTH),
                        Usage(prompt_tokens=5, completion_tokens=1))
    body = (await client.post("/infill", json={"input_prefix": "a", "input_suffix": "b",
                                               "n_predict": 1})).json()
    assert body["content"] == "x" and body["stop"] is True
    assert body["stop_type"] == "limit" and body["tokens_predicted"] == 1
    assert {"prompt_n", "predicted_n", "prompt_ms", "predicted_ms"} <= set(body["timings"])


async def test_n_cmpl_answers_an_array(client, fake_engine):
    fake_engine.enqueue(TextDelta("x", index=0), TextDelta("y", index=1),
                        Finish(FinishReason.STOP, index=0), Finish(FinishReason.STOP, index=1),
                        Usage(prompt_tokens=5, completion_tokens=2))
    body = (await client.post("/infill", json={"input_prefix": "a", "input_suffix": "b",
                                               "n_cmpl": 2})).json()
    assert [c["content"] for c in body] == ["x", "y"]


async def test_the_stream(client, fake_engine):
    fake_engine.enqueue(TextDelta("a"), TextDelta(" + b"), Finish(FinishReason.STOP),
                        Usage(prompt_tokens=5, completion_tokens=2))
    response = await client.post("/infill", json={"input_prefix": "a", "input_suffix": "b",
                                                   "stream": True})
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: ")]
    assert [e["content"] for e in events] == ["a", " + b", ""]
    assert [e["stop"] for e in events] == [False, False, True]
    assert events[-1]["stop_type"] == "eos"


@pytest.mark.parametrize(("body", "message"), [
    ({"input_suffix": "b"}, '"input_prefix" is required'),
    ({"input_prefix": "a"}, '"input_suffix" is required'),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "x"}]}, "text"),
    ({"input_prefix": "a", "input_suffix": "b", "prompt": 5}, "prompt"),
])
async def test_refusals_in_llama_servers_envelope(client, body, message):
    response = await client.post("/infill", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"code", "message", "type"} and message in error["message"]
