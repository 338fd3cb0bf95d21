"""Chat Completions fields vLLM and llama-server add, which Parlance reads and writes so
that one Parlance can stand upstream of another without losing anything: the prefill
switch (`continue_final_message`, `add_generation_prompt`) and `stop_reason` naming the
stop string that ended a choice."""

from __future__ import annotations

from parlance.core.events import Finish, FinishReason, TextDelta, Usage
from tests.support.sse import sse_data

CHAT = "/v1/chat/completions"
PREFILLED = {"model": "fake-model", "messages": [{"role": "user", "content": "Hi"},
                                                 {"role": "assistant", "content": "Hello"}]}


async def test_continue_final_message_continues_the_last_assistant_message(client,
                                                                           fake_engine):
    response = await client.post(CHAT, json={**PREFILLED, "continue_final_message": True,
                                             "add_generation_prompt": False})
    assert response.status_code == 200, response.text
    assert fake_engine.requests[-1].continue_final
    await client.post(CHAT, json=PREFILLED)
    assert not fake_engine.requests[-1].continue_final


async def test_continue_final_message_refusals_name_the_parameter(client):
    both = await client.post(CHAT, json={**PREFILLED, "continue_final_message": True})
    assert both.status_code == 400
    assert both.json()["error"]["param"] == "add_generation_prompt"
    user_last = await client.post(CHAT, json={
        "model": "fake-model", "messages": [{"role": "user", "content": "Hi"}],
        "continue_final_message": True, "add_generation_prompt": False})
    assert user_last.status_code == 400
    assert user_last.json()["error"]["param"] == "continue_final_message"


async def test_stop_reason_names_the_stop_string_that_matched(client, fake_engine):
    for _ in range(2):
        fake_engine.enqueue(TextDelta("One, two"), Finish(FinishReason.STOP, 0, "three"),
                            Usage(3, 2))
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "Count"}],
            "stop": ["three"]}
    whole = (await client.post(CHAT, json=body)).json()
    assert whole["choices"][0]["stop_reason"] == "three"
    frames = sse_data((await client.post(CHAT, json={**body, "stream": True})).text)
    finish = next(f for f in frames if isinstance(f, dict) and f["choices"]
                  and f["choices"][0]["finish_reason"])
    assert finish["choices"][0]["stop_reason"] == "three"


async def test_no_stop_reason_without_a_stop_string(client, fake_engine):
    whole = (await client.post(CHAT, json={"model": "fake-model", "messages": [
        {"role": "user", "content": "Hi"}]})).json()
    assert "stop_reason" not in whole["choices"][0]


async def test_repeat_last_n_is_read_as_llama_server_names_it(client, fake_engine):
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "Hi"}]}
    await client.post(CHAT, json={**body, "repeat_last_n": 8, "repeat_penalty": 1.3})
    sampling = fake_engine.requests[-1].sampling
    assert (sampling.repeat_last_n, sampling.repeat_penalty) == (8, 1.3)
    assert "repeat_last_n" in fake_engine.requests[-1].sampling_set
    await client.post(CHAT, json=body)
    assert fake_engine.requests[-1].sampling.repeat_last_n == 64  # llama.cpp's default
    refused = await client.post(CHAT, json={**body, "repeat_last_n": -2})
    assert refused.status_code == 400
