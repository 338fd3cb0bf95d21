"""End to end through the llama.cpp engine with tiny GGUFs of the families people run
(tests/support/family_gguf.py: the family's real tokenizer and chat template, random
weights). A random network writes nonsense, so each test asks only for what the engine
guarantees whatever the weights: a forced call (a grammar in the family's own markup,
`tool_choice` required or named) comes back as a parsed call valid for its schema in
every dialect (LM Studio's native chat forces calls to its integrations' tools; Ollama
has no `tool_choice`, so what it forces is `format`), its special tokens single tokens;
structured output holds its schema; a second turn with the call's result renders and
nothing of the markup reaches content. gpt-oss (harmony), Qwen3-Coder (XML calls) and
Qwen3 (Hermes calls, `<think>`).

The schema's values are an enum and a one-digit integer so that a forced call ends by
itself (a free string would run as long as the random network likes)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator

import jsonschema
import pytest

from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest, SamplingParams
from parlance.core.tools import ToolChoice, ToolSpec
from parlance.engines.llamacpp import LlamaCppEngine
from parlance.engines.llamacpp.model import ContextSettings
from parlance.integrations.settings import IntegrationSettings
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support import mcp_server
from tests.support.family_gguf import (
    DEEPSEEK_V3,
    GPT_OSS,
    QWEN3,
    QWEN3_CODER,
    Family,
    family_gguf,
)
from tests.support.real_engine import REQUEST_TIMEOUT, asgi_client, assert_idle_soon, run

pytestmark = pytest.mark.model

SCHEMA = {"type": "object",
          "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                         "days": {"type": "integer", "minimum": 1, "maximum": 7}},
          "required": ["city", "days"], "additionalProperties": False}
WEATHER = {"name": "get_weather", "description": "The forecast for a city",
           "parameters": SCHEMA}
CHAT_TOOLS = [{"type": "function", "function": WEATHER}]
# What a family's markup is made of, none of which may reach a client's content.
MARKUP = {
    GPT_OSS.name: ("<|channel|>", "<|message|>", "<|call|>", "<|start|>", "<|end|>",
                   "<|constrain|>", "to=functions", "<|return|>"),
    QWEN3_CODER.name: ("<tool_call>", "</tool_call>", "<function=", "<parameter=",
                       "<|im_end|>", "<|im_start|>", "<tool_response>"),
    QWEN3.name: ("<tool_call>", "</tool_call>", "<think>", "</think>", "<|im_end|>",
                 "<|im_start|>", "<tool_response>"),
    DEEPSEEK_V3.name: ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>",
                       "<｜tool▁call▁end｜>", "<｜end▁of▁sentence｜>", "<｜tool▁output▁begin｜>",
                       "<｜Assistant｜>", "<tool_call>"),
}
# How a forced call must be spelled: (special tokens it must hold as single tokens,
# text it must contain), in the family's own markup as its template teaches it.
FORCED_MARKUP = {
    # `<|call|>` ends the turn (an end-of-generation token), so it is not among the
    # tokens the output reports; the grammar's last token is it all the same.
    GPT_OSS.name: (("<|channel|>", "<|message|>"),
                   ("to=functions.get_weather", "<|message|>{")),
    QWEN3_CODER.name: (("<tool_call>",),
                       ("<function=get_weather>", "<parameter=city>", "Paris", "</function>")),
    QWEN3.name: (("<tool_call>", "</tool_call>"), ('"name": "get_weather"', '"arguments": {')),
    DEEPSEEK_V3.name: (("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>"),
                       ("function<｜tool▁sep｜>get_weather\n```json\n{",)),
}
FAMILIES = [pytest.param(GPT_OSS, id=GPT_OSS.name),
            pytest.param(QWEN3_CODER, id=QWEN3_CODER.name),
            pytest.param(DEEPSEEK_V3, id=DEEPSEEK_V3.name),
            pytest.param(QWEN3, id=QWEN3.name)]
MODEL = "tiny-family"


@pytest.fixture(scope="module")
def engines() -> Iterator[Callable[[Family], LlamaCppEngine]]:
    """Each family's engine, loaded once for the module."""
    loaded: dict[str, LlamaCppEngine] = {}

    def engine_of(family: Family) -> LlamaCppEngine:
        if family.name not in loaded:
            loaded[family.name] = LlamaCppEngine.load(
                family_gguf(family), ContextSettings(n_ctx=4096, n_threads=2, parallel=2))
        return loaded[family.name]

    yield engine_of
    for engine in loaded.values():
        assert_idle_soon(engine)
        asyncio.run(engine.aclose())


@pytest.fixture(params=FAMILIES)
def family(request, engines) -> tuple[Family, LlamaCppEngine]:
    return request.param, engines(request.param)


@pytest.fixture
def client(family):
    path = family_gguf(family[0])
    models = ServedModels([ServedModel(ModelSpec(id=MODEL, locate=lambda: path), family[1],
                                       int(time.time()))])
    # LM Studio's native chat calls tools of MCP servers the request names (integrations)
    integrations = IntegrationSettings(allow_request_servers=True,
                                       allowed_hosts=("127.0.0.1",))
    return asgi_client(create_app(models, ServerSettings(request_timeout=REQUEST_TIMEOUT,
                                                         integrations=integrations)))


@pytest.fixture(scope="module")
def weather_mcp() -> Iterator[mcp_server.RunningServer]:
    running = mcp_server.start(build=mcp_server.build_weather_server)
    yield running
    running.stop()


def valid(arguments: dict | str) -> dict:
    value = json.loads(arguments) if isinstance(arguments, str) else arguments
    jsonschema.validate(value, SCHEMA)
    return value


def no_markup(family: Family, text: str | None) -> None:
    for marker in MARKUP[family.name]:
        assert marker not in (text or ""), f"{marker!r} leaked into content: {text!r}"


# -- the engine: what the model was made to write ---------------------------------------


@pytest.mark.parametrize("fam", [pytest.param(f, id=f.name)
                                 for f in (GPT_OSS, QWEN3_CODER, QWEN3, DEEPSEEK_V3)])
async def test_a_forced_call_is_written_in_the_familys_own_markup(engines, fam):
    engine = engines(fam)
    request = GenerationRequest(
        model=MODEL, prompts=(ChatInput((Message("user", "Weather in Paris?"),)),),
        sampling=SamplingParams(temperature=0.0), max_tokens=200,
        tools=(ToolSpec("get_weather", "The forecast", SCHEMA),),
        tool_choice=ToolChoice("named", "get_weather"))
    result = await run(engine, request)
    (call,) = result.result.choice(0).tool_calls
    assert call.name == "get_weather"
    valid(call.arguments)
    finish = result.events[-2]
    written = [engine.model.piece(t, special=True).decode() for t in finish.token_ids]
    specials, texts = FORCED_MARKUP[fam.name]
    for special in specials:
        (token,) = engine.model.tokenize(special, add_special=False, parse_special=True)
        assert token in finish.token_ids, (special, "".join(written))
    for text in texts:
        assert text in "".join(written), (text, "".join(written))


# -- every dialect: a forced call comes back parsed and valid --------------------------


async def test_chat_completions_named_call(client, family):
    async with client:
        response = await client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": CHAT_TOOLS, "max_tokens": 200, "temperature": 0,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
    assert response.status_code == 200, response.text
    message = response.json()["choices"][0]["message"]
    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    valid(call["function"]["arguments"])
    no_markup(family[0], message.get("content"))
    assert response.json()["choices"][0]["finish_reason"] == "tool_calls"


async def test_chat_completions_required_call_streamed(client, family):
    async with client:
        response = await client.post("/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "Weather in Oslo?"}],
            "tools": CHAT_TOOLS, "tool_choice": "required", "max_tokens": 200,
            "temperature": 0, "stream": True})
    assert response.status_code == 200, response.text
    arguments, content, names, finish = "", "", [], None
    for line in response.text.splitlines():
        if not line.startswith("data: {"):
            continue
        choice = json.loads(line[6:])["choices"][0]
        delta = choice["delta"]
        content += delta.get("content") or ""
        for call in delta.get("tool_calls") or ():
            names += [call["function"]["name"]] if call["function"].get("name") else []
            arguments += call["function"].get("arguments") or ""
        finish = choice["finish_reason"] or finish
    assert response.text.rstrip().endswith("data: [DONE]")
    assert names == ["get_weather"]
    valid(arguments)
    no_markup(family[0], content)
    assert finish == "tool_calls"


async def test_responses_required_call(client, family):
    async with client:
        response = await client.post("/v1/responses", json={
            "model": MODEL, "input": "Weather in Paris?", "tool_choice": "required",
            "tools": [{"type": "function", **WEATHER}], "max_output_tokens": 200,
            "temperature": 0, "store": False})
    assert response.status_code == 200, response.text
    output = response.json()["output"]
    calls = [item for item in output if item["type"] == "function_call"]
    assert [c["name"] for c in calls] == ["get_weather"]
    valid(calls[0]["arguments"])
    for item in output:
        for part in item.get("content") or ():
            no_markup(family[0], part.get("text"))


async def test_anthropic_messages_named_tool(client, family):
    async with client:
        response = await client.post("/v1/messages", json={
            "model": MODEL, "max_tokens": 200, "temperature": 0,
            "messages": [{"role": "user", "content": "Weather in Oslo?"}],
            "tools": [{"name": "get_weather", "description": "The forecast",
                       "input_schema": SCHEMA}],
            "tool_choice": {"type": "tool", "name": "get_weather"}})
    assert response.status_code == 200, response.text
    body = response.json()
    uses = [block for block in body["content"] if block["type"] == "tool_use"]
    assert [u["name"] for u in uses] == ["get_weather"]
    valid(uses[0]["input"])
    assert body["stop_reason"] == "tool_use"
    for block in body["content"]:
        no_markup(family[0], block.get("text"))


async def test_ollama_structured_output_holds_the_schema(client, family):
    """Ollama has no `tool_choice`: what it can force is `format`, a JSON Schema."""
    async with client:
        response = await client.post("/api/chat", json={
            "model": MODEL, "stream": False, "format": SCHEMA,
            "options": {"temperature": 0, "num_predict": 200},
            "messages": [{"role": "user", "content": "Weather in Paris as JSON"}]})
    assert response.status_code == 200, response.text
    valid(response.json()["message"]["content"])


async def test_lmstudio_required_call_runs_the_integrations_tool(client, family, weather_mcp):
    """LM Studio's `/api/v1/chat` has `tool_choice` for the tools of its integrations
    (MCP servers the server calls itself): the forced call is parsed from the family's
    markup, valid, and run; the model then answers the result (to its token limit)."""
    async with client:
        response = await client.post("/api/v1/chat", json={
            "model": MODEL, "input": "Weather in Oslo?", "tool_choice": "required",
            "max_output_tokens": 120, "temperature": 0,
            "integrations": [{"type": "ephemeral_mcp", "server_label": "weather",
                              "server_url": weather_mcp.url,
                              "allowed_tools": ["get_weather"]}]})
    assert response.status_code == 200, response.text
    output = response.json()["output"]
    calls = [item for item in output if item["type"] == "tool_call"]
    assert [c["tool"] for c in calls] == ["get_weather"], output
    valid(calls[0]["arguments"])
    assert "days of sun in" in calls[0]["output"], calls[0]
    for item in output:
        if item["type"] == "message":
            no_markup(family[0], item.get("content"))


# -- the second turn: a call and its result go back through the template ---------------


async def test_history_round_trip_in_every_dialect(client, family):
    fam = family[0]
    arguments = {"city": "Paris", "days": 2}
    result = json.dumps({"forecast": "sunny"})
    async with client:
        chat = await client.post("/v1/chat/completions", json={
            "model": MODEL, "max_tokens": 8, "temperature": 0, "tools": CHAT_TOOLS,
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_abc123", "type": "function", "function": {
                        "name": "get_weather", "arguments": json.dumps(arguments)}}]},
                {"role": "tool", "tool_call_id": "call_abc123", "content": result}]})
        responses = await client.post("/v1/responses", json={
            "model": MODEL, "max_output_tokens": 8, "temperature": 0, "store": False,
            "tools": [{"type": "function", **WEATHER}],
            "input": [
                {"role": "user", "content": "Weather in Paris?"},
                {"type": "function_call", "call_id": "call_abc123", "name": "get_weather",
                 "arguments": json.dumps(arguments)},
                {"type": "function_call_output", "call_id": "call_abc123",
                 "output": result}]})
        anthropic = await client.post("/v1/messages", json={
            "model": MODEL, "max_tokens": 8, "temperature": 0,
            "tools": [{"name": "get_weather", "input_schema": SCHEMA}],
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                     "input": arguments}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": result}]}]})
        ollama = await client.post("/api/chat", json={
            "model": MODEL, "stream": False, "tools": CHAT_TOOLS,
            "options": {"temperature": 0, "num_predict": 8},
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "get_weather", "arguments": arguments}}]},
                {"role": "tool", "content": result}]})
        lmstudio = await client.post("/api/v1/chat", json={
            "model": MODEL, "input": "Weather in Paris?", "max_output_tokens": 8,
            "temperature": 0})
    for response in (chat, responses, anthropic, ollama, lmstudio):
        assert response.status_code == 200, (response.request.url, response.text)
    no_markup(fam, chat.json()["choices"][0]["message"]["content"])
    for item in responses.json()["output"]:
        for part in item.get("content") or ():
            no_markup(fam, part.get("text"))
    for block in anthropic.json()["content"]:
        no_markup(fam, block.get("text"))
    no_markup(fam, ollama.json()["message"]["content"])
    for item in lmstudio.json()["output"]:
        no_markup(fam, item.get("content"))
