"""Legacy Completions encoder and parser with the fake engine."""

from __future__ import annotations

import pytest

from parlance.core.events import Finish, FinishReason, TextDelta, TokenLogprob, TopLogprob, Usage
from parlance.core.request import TextInput
from tests.support.sse import sse_data
from tests.support.transcripts import assert_transcript

COMPLETIONS = "/v1/completions"


def _lp(text: str, logprob: float | None) -> TokenLogprob:
    top = (TopLogprob(text, logprob or 0.0, tuple(text.encode())),)
    return TokenLogprob(text, logprob, tuple(text.encode()), top)


async def test_completions_stream_transcript(client, fake_engine, fixed_ids):
    fake_engine.enqueue(TextDelta(" Once"), TextDelta(" upon"), Finish(FinishReason.LENGTH),
                        Usage(4, 2))
    response = await client.post(COMPLETIONS, json={
        "prompt": "Once upon a time", "max_tokens": 2, "stream": True,
        "stream_options": {"include_usage": True}})
    assert response.status_code == 200
    assert_transcript("completions_stream_usage.sse", response.text)


async def test_completions_logprobs_offsets_count_from_prompt_start(client, fake_engine):
    fake_engine.enqueue(TextDelta(" a", logprobs=(_lp(" a", -1.0),)),
                        TextDelta("bc", logprobs=(_lp("b", -2.0), _lp("c", -3.0))),
                        Finish(FinishReason.STOP), Usage(2, 3))
    frames = sse_data((await client.post(COMPLETIONS, json={
        "prompt": "Hi you", "logprobs": 1, "stream": True})).text)
    first, second = frames[0]["choices"][0]["logprobs"], frames[1]["choices"][0]["logprobs"]
    assert first == {"tokens": [" a"], "token_logprobs": [-1.0],
                     "top_logprobs": [{" a": -1.0}], "text_offset": [6]}
    assert second["tokens"] == ["b", "c"] and second["text_offset"] == [8, 9]
    assert frames[2]["choices"][0]["finish_reason"] == "stop"


async def test_completions_echo_offsets_start_at_zero_and_non_stream_joins(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hi", logprobs=(_lp("Hi", None),)),
                        TextDelta("!", logprobs=(_lp("!", -0.5),)),
                        Finish(FinishReason.STOP), Usage(1, 1))
    body = (await client.post(COMPLETIONS, json={"prompt": "Hi", "echo": True,
                                                 "logprobs": 0})).json()
    choice = body["choices"][0]
    assert choice["text"] == "Hi!"
    assert choice["logprobs"]["token_logprobs"] == [None, -0.5]
    assert choice["logprobs"]["text_offset"] == [0, 2]
    assert fake_engine.requests[-1].echo is True


async def test_completions_prompt_forms(client, fake_engine):
    for prompt, expected in [
        ("x", (TextInput(text="x"),)),
        (["a", "b"], (TextInput(text="a"), TextInput(text="b"))),
        ([1, 2, 3], (TextInput(token_ids=(1, 2, 3)),)),
        ([[1], [2, 3]], (TextInput(token_ids=(1,)), TextInput(token_ids=(2, 3)))),
    ]:
        response = await client.post(COMPLETIONS, json={"prompt": prompt})
        assert response.status_code == 200
        assert fake_engine.requests[-1].prompts == expected
    body = response.json()
    assert [c["index"] for c in body["choices"]] == [0, 1]


async def test_completions_default_max_tokens_is_16(client, fake_engine):
    await client.post(COMPLETIONS, json={"prompt": "x"})
    assert fake_engine.requests[-1].max_tokens == 16


@pytest.mark.parametrize(("body", "param"), [
    ({}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": "x", "logprobs": 6}, "logprobs"),
    ({"prompt": "x", "n": 0}, "n"),
    ({"prompt": "x", "best_of": 2}, "best_of"),
    ({"prompt": "x", "max_tokens": -1}, "max_tokens"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": [1, -2]}, "prompt"),
    ({"prompt": 5}, "prompt"),
])
async def test_completions_invalid_requests_are_400(client, body, param):
    response = await client.post(COMPLETIONS, json=body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


async def test_completions_byte_fragment_alternatives_are_spelled_by_their_bytes(
        client, fake_engine):
    fragments = (TopLogprob("\ufffd", -0.5, (0xE6, 0x97)), TopLogprob("\ufffd", -0.9, (0xF0,)))
    fake_engine.enqueue(TextDelta("", logprobs=(TokenLogprob("", -0.5, (0xE6, 0x97), fragments),)),
                        Finish(FinishReason.LENGTH), Usage(1, 1))
    body = (await client.post(COMPLETIONS, json={"prompt": "x", "logprobs": 2})).json()
    assert body["choices"][0]["logprobs"]["top_logprobs"] == [
        {"bytes:\\xe6\\x97": -0.5, "bytes:\\xf0": -0.9}]
