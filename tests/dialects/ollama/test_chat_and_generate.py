"""Ollama `/api/chat` and `/api/generate` over the fake engine: NDJSON transcripts, the
stream and `stream: false` agreeing, load/unload answers, the request mapping
(messages, tools, think, format, options, keep_alive, context), errors in Ollama's
envelope. Every line is checked by tests/support/ollama_contract.py (the `ollama` client's
types included)."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from parlance.core.errors import EngineFailure
from parlance.core.events import (
    Failed,
    Finish,
    FinishReason,
    TextDelta,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from parlance.core.messages import Message, ToolCall
from parlance.core.request import ChatInput, TextInput
from parlance.core.tools import ReasoningEffort, ToolChoice
from parlance.dialects.ollama.request import keep_alive_seconds
from parlance.engines.fake import FakeEngine, Generated
from tests.support.fake_app import make_app
from tests.support.ollama_contract import check_error, check_line, check_stream
from tests.support.transcripts import assert_transcript

CHAT = "/api/chat"
GENERATE = "/api/generate"
HELLO = {"model": "fake-model", "messages": [{"role": "user", "content": "Hello!"}]}
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
NDJSON = "application/x-ndjson"


def hi_there() -> list:
    return [TextDelta("Hi"), TextDelta(" there"), Finish(FinishReason.STOP),
            Usage(6, 2, 0.01, 0.02)]


async def _stream(client: httpx.AsyncClient, path: str, body: dict) -> str:
    response = await client.post(path, json=body)  # streaming is Ollama's default
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == NDJSON
    return response.text


# -- streams ------------------------------------------------------------------------


async def test_chat_stream_transcript(client, fake_engine, fixed_ids):
    fake_engine.enqueue(*hi_there())
    body = await _stream(client, CHAT, HELLO)
    assert_transcript("ollama_chat.ndjson", body)
    lines = check_stream(body, generate=False)
    assert [line["message"]["content"] for line in lines] == ["Hi", " there", ""]
    assert lines[-1] == {
        "model": "fake-model", "created_at": "2023-08-04T19:22:45.499127Z",
        "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop",
        "total_duration": 250_000_000, "load_duration": 2_000_000, "prompt_eval_count": 6,
        "prompt_eval_duration": 10_000_000, "eval_count": 2, "eval_duration": 20_000_000}


async def test_chat_without_stream_is_one_object_agreeing_with_the_stream(client, fake_engine):
    fake_engine.enqueue(Generated("<think>Hmm.</think>"), *hi_there())
    fake_engine.enqueue(Generated("<think>Hmm.</think>"), *hi_there())
    lines = check_stream(await _stream(client, CHAT, {**HELLO, "think": True}),
                         generate=False)
    response = await client.post(CHAT, json={**HELLO, "think": True, "stream": False})
    assert response.headers["content-type"] == "application/json"
    whole = response.json()
    check_line(whole, generate=False)
    assert whole["message"] == {
        "role": "assistant", "content": "".join(ln["message"]["content"] for ln in lines),
        "thinking": "".join(ln["message"].get("thinking", "") for ln in lines)}
    assert whole["message"] == {"role": "assistant", "content": "Hi there",
                                "thinking": "Hmm."}
    metrics = {"done", "done_reason", "prompt_eval_count", "prompt_eval_duration",
               "eval_count", "eval_duration"}
    assert {k: whole[k] for k in metrics} == {k: lines[-1][k] for k in metrics}


@pytest.mark.parametrize("path", [CHAT, GENERATE])
async def test_the_final_line_says_how_long_the_loaded_model_took_to_be_ready(client, path):
    """Ollama always sends `load_duration`, the time to get the model ready (a few ms
    for a model loaded already), a part of `total_duration`."""
    body = HELLO if path == CHAT else {"model": "fake-model", "prompt": "Hello!"}
    last = check_stream(await _stream(client, path, body), generate=path == GENERATE)[-1]
    whole = (await client.post(path, json={**body, "stream": False})).json()
    for final in (last, whole):
        assert isinstance(final["load_duration"], int) and final["load_duration"] > 0
        assert final["load_duration"] < final["total_duration"]


async def test_generate_stream_transcript_with_context(client, fake_engine, fixed_ids):
    fake_engine.enqueue(TextDelta("Rayleigh"), TextDelta(" scattering."),
                        Finish(FinishReason.STOP, token_ids=(41, 42)), Usage(9, 2, 0.01, 0.02))
    body = await _stream(client, GENERATE, {"model": "fake-model", "system": "Be brief.",
                                            "prompt": "Why is the sky blue?"})
    assert_transcript("ollama_generate.ndjson", body)
    lines = check_stream(body, generate=True)
    assert [line["response"] for line in lines] == ["Rayleigh", " scattering.", ""]
    # the prompt's tokens (the fake's: one per word), then the answer's
    assert lines[-1]["context"] == [0, 1, 2, 3, 4, 5, 6, 41, 42]
    request = fake_engine.requests[-1]
    assert request.prompts == (ChatInput((Message("system", "Be brief."),
                                          Message("user", "Why is the sky blue?"))),)


async def test_generate_without_stream(client, fake_engine):
    fake_engine.enqueue(Generated("<think>Sky.</think>Blue."),
                        Finish(FinishReason.LENGTH, token_ids=(5,)), Usage(4, 3, 0.01, 0.02))
    whole = (await client.post(GENERATE, json={"model": "fake-model", "prompt": "Sky?",
                                               "think": "high", "stream": False})).json()
    check_line(whole, generate=True)
    assert (whole["response"], whole["thinking"], whole["done_reason"]) == (
        "Blue.", "Sky.", "length")
    assert whole["context"] == [0, 5]
    assert fake_engine.requests[-1].reasoning.effort is ReasoningEffort.HIGH


async def test_thinking_stream_transcript(client, fake_engine, fixed_ids):
    fake_engine.enqueue(Generated("<think>Short"), Generated(" thought.</think>"),
                        Generated("The answer."), Finish(FinishReason.STOP), Usage(6, 4))
    body = await _stream(client, CHAT, {**HELLO, "think": True})
    assert_transcript("ollama_chat_thinking.ndjson", body)
    lines = check_stream(body, generate=False)
    assert [(ln["message"].get("thinking"), ln["message"]["content"]) for ln in lines] == [
        ("Short", ""), (" thought.", ""), (None, "The answer."), (None, "")]
    assert fake_engine.requests[-1].reasoning.effort is ReasoningEffort.ON


async def test_generate_thinking_stream_transcript(client, fake_engine, fixed_ids):
    fake_engine.enqueue(Generated("<think>Short thought.</think>"), Generated("Blue."),
                        Finish(FinishReason.STOP), Usage(3, 4))
    body = await _stream(client, GENERATE, {"model": "fake-model", "prompt": "Sky colour?",
                                            "think": True})
    assert_transcript("ollama_generate_thinking.ndjson", body)
    lines = check_stream(body, generate=True)
    assert [(ln.get("thinking"), ln["response"]) for ln in lines] == [
        ("Short thought.", ""), (None, "Blue."), (None, "")]


async def test_tool_calls_stream_transcript(client, fake_engine, fixed_ids):
    fake_engine.enqueue(Generated("Let me check.\n" + CALL[:30]), Generated(CALL[30:]),
                        Finish(FinishReason.STOP), Usage(9, 12))
    body = await _stream(client, CHAT, {**HELLO, "tools": [WEATHER]})
    assert_transcript("ollama_chat_tool_calls.ndjson", body)
    lines = check_stream(body, generate=False)
    calls = [ln["message"]["tool_calls"] for ln in lines if "tool_calls" in ln["message"]]
    assert calls == [[{"id": "call_test", "function": {
        "index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}}]]
    assert lines[-1]["done_reason"] == "stop"  # Ollama ends a turn of calls with "stop"
    assert fake_engine.requests[-1].tool_choice == ToolChoice("auto")


async def test_tool_round_trip_maps_calls_and_results(client, fake_engine):
    body = {"model": "fake-model", "tools": [WEATHER], "stream": False, "messages": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
            {"function": {"index": 1, "name": "get_weather", "arguments": {"city": "Rome"}}}]},
        {"role": "tool", "content": "11 degrees", "tool_name": "get_weather"},
        {"role": "tool", "content": "20 degrees", "tool_name": "get_weather"}]}
    assert (await client.post(CHAT, json=body)).status_code == 200
    messages = fake_engine.requests[-1].prompts[0].messages
    assert messages[1:] == (
        Message("assistant", "", tool_calls=(
            ToolCall("call_1_0", "get_weather", '{"city": "Paris"}'),
            ToolCall("call_1_1", "get_weather", '{"city": "Rome"}'))),
        Message("tool", "11 degrees", name="get_weather", tool_call_id="call_1_0"),
        Message("tool", "20 degrees", name="get_weather", tool_call_id="call_1_1"))


async def test_format_schema_stream_transcript(client, fake_engine, fixed_ids):
    schema = {"type": "object", "properties": {"age": {"type": "integer"}},
              "required": ["age"]}
    fake_engine.enqueue(Generated('{"age": '), Generated("22}"), Finish(FinishReason.STOP),
                        Usage(7, 5))
    body = await _stream(client, CHAT, {**HELLO, "format": schema})
    assert_transcript("ollama_chat_format.ndjson", body)
    lines = check_stream(body, generate=False)
    assert json.loads("".join(ln["message"]["content"] for ln in lines)) == {"age": 22}
    fmt = fake_engine.requests[-1].response_format
    assert (fmt.kind, fmt.schema, fmt.strict, fmt.param) == ("json_schema", schema, True,
                                                            "format")
    await client.post(CHAT, json={**HELLO, "format": "json", "stream": False})
    assert fake_engine.requests[-1].response_format.kind == "json_object"


async def test_logprobs_ride_with_their_lines(client, fake_engine):
    top = (TopLogprob("Hi", -0.1, (72, 105)), TopLogprob("Yo", -2.5, (89, 111)))
    fake_engine.enqueue(TextDelta("Hi", logprobs=(TokenLogprob("Hi", -0.1, (72, 105), top),)),
                        Finish(FinishReason.STOP), Usage(6, 1))
    lines = check_stream(await _stream(client, CHAT, {**HELLO, "logprobs": True,
                                                      "top_logprobs": 2}), generate=False)
    assert lines[0]["logprobs"] == [{"token": "Hi", "logprob": -0.1, "bytes": [72, 105],
                                     "top_logprobs": [
                                         {"token": "Hi", "logprob": -0.1, "bytes": [72, 105]},
                                         {"token": "Yo", "logprob": -2.5, "bytes": [89, 111]}]}]
    assert fake_engine.requests[-1].logprobs == 2


async def test_mid_stream_failure_is_a_last_error_line(client, fake_engine, fixed_ids):
    fake_engine.enqueue(TextDelta("Hi"), Failed(EngineFailure("llama_decode failed")))
    body = await _stream(client, CHAT, HELLO)
    assert_transcript("ollama_chat_failure.ndjson", body)
    lines = check_stream(body, generate=False)
    assert lines[-1] == {"error": "llama_decode failed"}


async def test_failure_without_stream_is_a_500(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hi"), Failed(EngineFailure("llama_decode failed")))
    response = await client.post(CHAT, json={**HELLO, "stream": False})
    assert response.status_code == 500
    assert check_error(response.json()) == "llama_decode failed"


# -- load and unload ----------------------------------------------------------------


async def test_empty_messages_load_and_keep_alive_0_unloads(client, fake_engine, fixed_ids):
    loaded = await client.post(CHAT, json={"model": "fake-alias", "messages": []})
    assert loaded.status_code == 200 and loaded.headers["content-type"] == "application/json"
    assert_transcript("ollama_chat_load.json", loaded.text)
    check_line(loaded.json(), generate=False)
    assert loaded.json()["done_reason"] == "load" and not fake_engine.requests
    unloaded = await client.post(GENERATE, json={"model": "fake-model", "keep_alive": 0})
    assert_transcript("ollama_generate_unload.json", unloaded.text)
    check_line(unloaded.json(), generate=True)
    assert unloaded.json()["done_reason"] == "unload"
    # gone (this server has no loader to bring it back)
    gone = await client.post(CHAT, json=HELLO)
    assert gone.status_code == 404
    assert check_error(gone.json()) == "model 'fake-model' not found"


async def test_generate_without_prompt_loads(client, fake_engine):
    body = (await client.post(GENERATE, json={"model": "fake-model"})).json()
    assert (body["response"], body["done"], body["done_reason"]) == ("", True, "load")


async def test_unloading_a_model_that_does_not_exist_is_a_404(client):
    response = await client.post(CHAT, json={"model": "nope", "messages": [], "keep_alive": 0})
    assert response.status_code == 404
    assert check_error(response.json()) == "model 'nope' not found"


# -- the request ------------------------------------------------------------------


async def test_options_map_to_sampling_and_ollamas_defaults_fill_the_rest(client, fake_engine):
    await client.post(CHAT, json={**HELLO, "stream": False})
    plain = fake_engine.requests[-1]
    assert (plain.sampling.temperature, plain.sampling.top_k, plain.sampling.top_p) == (
        0.8, 40, 0.9)
    assert plain.sampling_set == frozenset() and plain.max_tokens is None
    options = {"temperature": 0.2, "top_k": 7, "top_p": 0.5, "min_p": 0.05, "seed": 42,
               "stop": ["\n", "user:"], "num_predict": 16, "repeat_penalty": 1.2,
               "repeat_last_n": 32, "presence_penalty": 0.5, "frequency_penalty": 0.25,
               "num_keep": 5, "num_ctx": 1024, "num_gpu": 1, "use_mmap": True,
               "typical_p": 0.7, "mirostat": 0}
    await client.post(CHAT, json={**HELLO, "stream": False, "options": options})
    request = fake_engine.requests[-1]
    s = request.sampling
    assert (s.temperature, s.top_k, s.top_p, s.min_p, s.seed, s.repeat_penalty,
            s.repeat_last_n, s.presence_penalty, s.frequency_penalty) == (
        0.2, 7, 0.5, 0.05, 42, 1.2, 32, 0.5, 0.25)
    assert request.sampling_set == {"temperature", "top_k", "top_p", "min_p", "seed",
                                    "repeat_penalty", "repeat_last_n", "presence_penalty",
                                    "frequency_penalty"}
    assert (request.stop, request.max_tokens) == (("\n", "user:"), 16)
    await client.post(CHAT, json={**HELLO, "stream": False,
                                  "options": {"seed": -1, "num_predict": -1}})
    request = fake_engine.requests[-1]
    assert (request.sampling.seed, request.max_tokens) == (None, None)


@pytest.mark.parametrize(("think", "effort", "best_effort"), [
    (True, ReasoningEffort.ON, False), (False, ReasoningEffort.NONE, True),
    ("low", ReasoningEffort.LOW, False), ("max", ReasoningEffort.HIGH, False)])
async def test_think_maps_to_the_reasoning_request(client, fake_engine, think, effort,
                                                    best_effort):
    await client.post(CHAT, json={**HELLO, "think": think, "stream": False})
    reasoning = fake_engine.requests[-1].reasoning
    assert (reasoning.effort, reasoning.best_effort, reasoning.param) == (
        effort, best_effort, "think")


async def test_generate_raw_suffix_and_context(client, fake_engine):
    await client.post(GENERATE, json={"model": "fake-model", "prompt": "[INST] hi [/INST]",
                                      "raw": True, "stream": False})
    assert fake_engine.requests[-1].prompts == (TextInput(text="[INST] hi [/INST]"),)
    await client.post(GENERATE, json={"model": "fake-model", "prompt": "def f(a):",
                                      "suffix": "    return a", "stream": False})
    assert fake_engine.requests[-1].prompts == (
        TextInput(text="def f(a):", suffix="    return a"),)
    await client.post(GENERATE, json={"model": "fake-model", "prompt": "And then?",
                                      "context": [3, 1, 4], "stream": False})
    assert fake_engine.requests[-1].prompts == (
        ChatInput((Message("user", "And then?"),), prefix_ids=(3, 1, 4)),)


async def test_a_chat_over_the_context_loses_its_oldest_turns():
    engine = FakeEngine(context_length=12)
    transport = httpx.ASGITransport(app=make_app(engine))
    turns = [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": "one two three four"},
             {"role": "assistant", "content": "five six seven eight"},
             {"role": "user", "content": "nine ten"}]
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.post(CHAT, json={"model": "fake-model", "messages": turns,
                                                 "stream": False})
        assert response.status_code == 200, response.text
        assert [m.content for m in engine.requests[-1].prompts[0].messages] == [
            "Be brief.", "nine ten"]
        refused = await client.post(CHAT, json={"model": "fake-model", "messages": turns,
                                                "stream": False, "truncate": False})
        assert refused.status_code == 400
        check_error(refused.json())


@pytest.mark.parametrize(("value", "seconds"), [
    (0, 0.0), (300, 300.0), (1.5, 1.5), (-1, math.inf), ("5m", 300.0), ("1h30m", 5400.0),
    ("0", 0.0), ("-1m", math.inf), ("250ms", 0.25), ("1.5h", 5400.0), (None, None)])
def test_keep_alive_is_seconds_or_a_go_duration(value, seconds):
    assert keep_alive_seconds(value) == seconds


@pytest.mark.parametrize(("path", "change", "words"), [
    (CHAT, {"think": "extreme"}, "think"),
    (CHAT, {"keep_alive": "5 minutes"}, "invalid duration"),
    (CHAT, {"keep_alive": "10"}, "invalid duration"),
    (CHAT, {"format": "yaml"}, "invalid format"),
    (CHAT, {"top_logprobs": 21}, "top_logprobs"),
    (CHAT, {"options": {"temperature": "hot"}}, "options.temperature"),
    (CHAT, {"messages": [{"role": "user", "content": "see", "images": ["aGk="]}]}, "vision"),
    (CHAT, {"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    (CHAT, {"model": ""}, "model"),
    (GENERATE, {"prompt": "hi", "images": ["aGk="]}, "vision"),
    (GENERATE, {"prompt": "hi", "raw": True, "system": "x"}, "raw mode does not support"),
    (GENERATE, {"prompt": "hi", "template": "{{ .Prompt }}"}, "template"),
    (GENERATE, {"prompt": "hi", "raw": True, "format": "json"}, "format"),
])
async def test_bad_requests_are_400s_in_ollamas_envelope(client, path, change, words):
    base = HELLO if path == CHAT else {"model": "fake-model", "prompt": "hi"}
    response = await client.post(path, json={**base, **change})
    assert response.status_code == 400, response.text
    assert words in check_error(response.json())


async def test_unknown_model_and_unknown_paths(client):
    response = await client.post(CHAT, json={**HELLO, "model": "llama3.2:latest"})
    assert response.status_code == 404
    assert check_error(response.json()) == "model 'llama3.2:latest' not found"
    unknown = await client.post("/api/nothing", json={})
    assert unknown.status_code == 404
    check_error(unknown.json())
    lmstudio = await client.get("/api/v1/nothing")
    assert lmstudio.status_code == 404 and isinstance(lmstudio.json()["error"], dict)
