"""Ollama's `/api/chat` and `/api/generate` on the REAL engine (SmolLM2, greedy), with
the official `ollama` Python client as oracle: streamed and whole answers agree, the
metrics are real, `context` is the prompt's tokens and the answer's and continues a
conversation, `format` is grammar-enforced, a tool result in the history reaches the
model, `think` is refused for a model that does not reason, logprobs and raw prompts."""

from __future__ import annotations

import json

import httpx
import jsonschema
import ollama
import pytest

from tests.support.json_prefix import json_prefix
from tests.support.ollama_contract import check_line, check_stream
from tests.support.real_engine import (
    CHAT_PROMPT,
    LONG_CHAT_PROMPT,
    MODEL_ID,
    REQUEST_TIMEOUT,
    local_engine_only,
    make_app,
    never_ending,
    recorded_starts,
)

pytestmark = pytest.mark.model

GREEDY = {"temperature": 0}
TAGGED = "smollm2:135m"  # the name Ollama's clients know it by


@pytest.fixture
def app(llama):
    return make_app(llama)


@pytest.fixture
def sdk(app) -> ollama.AsyncClient:
    return ollama.AsyncClient(host="http://parlance.test", timeout=REQUEST_TIMEOUT,
                              transport=httpx.ASGITransport(app=app))


@pytest.fixture
def raw(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                             base_url="http://parlance.test", timeout=REQUEST_TIMEOUT)


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


async def test_chat_streamed_and_whole_agree_with_real_metrics(sdk, raw):
    asked = {"model": TAGGED, "messages": user(CHAT_PROMPT), "options": GREEDY}
    whole = await sdk.chat(**asked)
    parts = [p async for p in await sdk.chat(**asked, stream=True)]
    assert whole.model == TAGGED and whole.message.content
    assert "".join(p.message.content for p in parts) == whole.message.content
    assert [p.done for p in parts].count(True) == 1 and parts[-1].done
    assert whole.done_reason == parts[-1].done_reason in ("stop", "length")
    assert whole.eval_count == parts[-1].eval_count > 0
    assert whole.prompt_eval_count and whole.prompt_eval_count > 0
    assert whole.prompt_eval_duration and whole.eval_duration
    assert whole.total_duration >= whole.prompt_eval_duration + whole.eval_duration
    # the bytes themselves, by the contract checker
    check_stream((await raw.post("/api/chat", json={**asked})).text, generate=False)


async def test_num_predict_cuts_with_done_reason_length(sdk, llama):
    with never_ending(llama):
        response = await sdk.chat(model=MODEL_ID, messages=user(LONG_CHAT_PROMPT),
                                  options={**GREEDY, "num_predict": 12})
    assert response.done_reason == "length" and response.eval_count == 12


async def test_repeat_last_n_is_the_window_the_penalty_looks_back_over(sdk, llama):
    asked = {"model": MODEL_ID, "messages": user(LONG_CHAT_PROMPT)}
    plain = {**GREEDY, "num_predict": 40}
    penalised = {**plain, "repeat_penalty": 1.5}
    with never_ending(llama):  # 40 tokens each
        base = (await sdk.chat(**asked, options=plain)).message.content
        # (this answer repeats itself within 40 tokens, so a penalty that sees it changes it)
        blind = await sdk.chat(**asked, options={**penalised, "repeat_last_n": 0})
        windowed = await sdk.chat(**asked, options={**penalised, "repeat_last_n": 64})
        whole = await sdk.chat(**asked, options={**penalised, "repeat_last_n": -1})
    assert blind.message.content == base
    assert windowed.message.content == whole.message.content != base


@local_engine_only("an upstream model refuses `context` token ids (400)")
async def test_generate_context_holds_the_tokens_and_continues_the_conversation(sdk, llama):
    options = {**GREEDY, "num_predict": 24}
    with never_ending(llama):
        first = await sdk.generate(model=MODEL_ID, prompt=CHAT_PROMPT, options=options)
        streamed = "".join([p.response async for p in await sdk.generate(
            model=MODEL_ID, prompt=CHAT_PROMPT, options=options, stream=True)])
        follow = await sdk.generate(model=MODEL_ID, prompt="Another one, please.",
                                    context=first.context, options=options)
    assert first.response and streamed == first.response
    assert len(first.context) == first.prompt_eval_count + first.eval_count
    assert follow.response
    # the earlier prompt and answer come first: all of them, then the new turn
    assert follow.prompt_eval_count > len(first.context)
    assert list(follow.context[:len(first.context)]) == list(first.context)


async def test_format_schema_is_enforced(sdk):
    # bounded, so the grammar is complete whatever the model writes
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
                                               "age": {"type": "integer", "minimum": 0,
                                                       "maximum": 150}},
              "required": ["name", "age"]}
    whole = await sdk.chat(model=MODEL_ID, format=schema, options=GREEDY,
                           messages=user("Extract the person: John is 31 years old."))
    assert whole.done_reason == "stop"
    jsonschema.validate(json.loads(whole.message.content), schema)
    parts = [p async for p in await sdk.chat(
        model=MODEL_ID, format=schema, options=GREEDY, stream=True,
        messages=user("Extract the person: John is 31 years old."))]
    assert "".join(p.message.content for p in parts) == whole.message.content
    as_json = await sdk.generate(model=MODEL_ID, prompt="List three colours as JSON.",
                                 format="json", options={**GREEDY, "num_predict": 60})
    if as_json.done_reason == "stop":
        assert isinstance(json.loads(as_json.response), dict)
    else:  # cut by num_predict: the start of an object
        assert as_json.response.lstrip().startswith("{") and json_prefix(as_json.response)


def get_weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
        city: The name of the city
    """
    return "It is 11 degrees Celsius and sunny in Paris."


async def test_a_tool_result_in_the_history_reaches_the_model(sdk, llama):
    messages = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": get_weather("Paris"), "tool_name": "get_weather"}]
    with recorded_starts(llama) as started:
        answer = await sdk.chat(model=MODEL_ID, messages=messages, tools=[get_weather],
                                options={**GREEDY, "num_predict": 60})
    assert [get_weather("Paris") in g.prompts[0].text for g in started] == [True]
    assert answer.done and answer.done_reason in ("stop", "length")
    offered = await sdk.chat(model=MODEL_ID, messages=messages[:1], tools=[get_weather],
                             options={**GREEDY, "num_predict": 60})
    # SmolLM2 answers in words when it may choose (no call); whatever it does is valid
    for call in offered.message.tool_calls or ():
        assert call.function.name == "get_weather" and isinstance(call.function.arguments,
                                                                  dict)


@local_engine_only("only the local engine knows the model has no reasoning markers")
async def test_think_true_is_a_400_for_a_model_that_does_not_reason(sdk, llama):
    with pytest.raises(ollama.ResponseError) as refused:
        await sdk.chat(model=MODEL_ID, messages=user(CHAT_PROMPT), think=True)
    assert refused.value.status_code == 400 and "reason" in refused.value.error
    with never_ending(llama):
        plain = await sdk.chat(model=MODEL_ID, messages=user(CHAT_PROMPT), think=False,
                               options={**GREEDY, "num_predict": 8})
    assert plain.message.content and not plain.message.thinking


async def test_logprobs_and_raw_prompts(raw, llama):
    with never_ending(llama):
        response = await raw.post("/api/generate", json={
            "model": MODEL_ID, "prompt": "Once upon a time", "raw": True, "stream": False,
            "logprobs": True, "top_logprobs": 2, "options": {**GREEDY, "num_predict": 8}})
    body = response.json()
    check_line(body, generate=True)
    assert "context" not in body  # raw prompts return none, as Ollama's
    assert len(body["logprobs"]) == body["eval_count"] == 8
    assert "".join(entry["token"] for entry in body["logprobs"]) == body["response"]
    assert all(len(entry["top_logprobs"]) == 2 for entry in body["logprobs"])


async def test_load_answer_for_a_loaded_model(sdk):
    loaded = await sdk.chat(model=TAGGED, messages=[])
    assert loaded.done and loaded.done_reason == "load"
