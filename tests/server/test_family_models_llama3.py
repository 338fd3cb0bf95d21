"""End to end through the llama.cpp engine with tiny GGUFs of the families built on
Llama 3's tokenizer (tests/support/family_gguf.py: the real tokenizer and each family's
own template, random weights): Llama 3.1 (JSON calls, and its builtin tools as
`<|python_tag|>name.call(…)`), Functionary v3.1 (`<function=…>`), Functionary v3.2
(`>>>name`) and FireFunction v2 (` functools[…]`). A random network writes nonsense, so
each test asks only for what the engine guarantees: a forced call is written in the
family's own markup (its special tokens single tokens) and comes back parsed, valid
for its schema, with none of the markup in the content."""

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
from parlance.models.registry import ModelSpec
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.family_gguf import (
    FIREFUNCTION_V2,
    FUNCTIONARY_V31,
    FUNCTIONARY_V32,
    LLAMA31,
    Family,
    family_gguf,
)
from tests.support.real_engine import REQUEST_TIMEOUT, asgi_client, assert_idle_soon, run

pytestmark = pytest.mark.model

SCHEMA = {"type": "object",
          "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo"]},
                         "days": {"type": "integer", "minimum": 1, "maximum": 7}},
          "required": ["city", "days"], "additionalProperties": False}
SEARCH = {"type": "object", "properties": {"query": {"type": "string", "enum": ["news"]}},
          "required": ["query"], "additionalProperties": False}
WEATHER = {"name": "get_weather", "description": "The forecast for a city",
           "parameters": SCHEMA}
CHAT_TOOLS = [{"type": "function", "function": WEATHER}]
MODEL = "tiny-llama3-family"
# (tool, its schema, special tokens the forced call must hold as single tokens, text it
# must contain): each family's own markup as its template teaches it.
FORCED = {
    LLAMA31.name: ("get_weather", SCHEMA, (), ('{"name": "get_weather", "parameters": {',)),
    "llama3.1-builtin": ("brave_search", SEARCH, ("<|python_tag|>",),
                         ('brave_search.call(query="news")',)),
    FUNCTIONARY_V31.name: ("get_weather", SCHEMA, (), ("<function=get_weather>{", "</function>")),
    FUNCTIONARY_V32.name: ("get_weather", SCHEMA, (), ('get_weather\n{"city": ',)),
    FIREFUNCTION_V2.name: ("get_weather", SCHEMA, (),
                           (' functools[{"name": "get_weather", "arguments": {',)),
}
MARKUP = ("<|python_tag|>", "<function=", "</function>", ">>>", "functools[", "<|eot_id|>",
          "<|eom_id|>", "<|start_header_id|>", '"name"')
FAMILIES = {f.name: f for f in (LLAMA31, FUNCTIONARY_V31, FUNCTIONARY_V32, FIREFUNCTION_V2)}


@pytest.fixture(scope="module")
def engines() -> Iterator[Callable[[Family], LlamaCppEngine]]:
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


@pytest.mark.parametrize("case", list(FORCED))
async def test_a_forced_call_is_written_in_the_familys_own_markup(engines, case):
    engine = engines(FAMILIES[case.removesuffix("-builtin")])
    name, schema, specials, texts = FORCED[case]
    request = GenerationRequest(
        model=MODEL, prompts=(ChatInput((Message("user", "Weather in Paris?"),)),),
        sampling=SamplingParams(temperature=0.0), max_tokens=200,
        tools=(ToolSpec(name, "A tool", schema),), tool_choice=ToolChoice("named", name))
    result = await run(engine, request)
    (call,) = result.result.choice(0).tool_calls
    assert call.name == name
    jsonschema.validate(json.loads(call.arguments), schema)
    finish = result.events[-2]
    written = "".join(engine.model.piece(t, special=True).decode() for t in finish.token_ids)
    for special in specials:
        (token,) = engine.model.tokenize(special, add_special=False, parse_special=True)
        assert token in finish.token_ids, (special, written)
    for text in texts:
        assert text in written, (text, written)


@pytest.fixture(params=list(FAMILIES))
def client(request, engines):
    family = FAMILIES[request.param]
    path = family_gguf(family)
    models = ServedModels([ServedModel(ModelSpec(id=MODEL, locate=lambda: path),
                                       engines(family), int(time.time()))])
    return asgi_client(create_app(models, ServerSettings(request_timeout=REQUEST_TIMEOUT)))


async def test_chat_completions_required_call_streamed(client):
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
    assert names == ["get_weather"]
    jsonschema.validate(json.loads(arguments), SCHEMA)
    for marker in MARKUP:
        assert marker not in content, (marker, content)
    assert finish == "tool_calls"


async def test_a_call_and_its_result_go_back_through_the_template(client):
    """The second turn: the earlier call (a builtin one, which Llama 3.1's template writes
    back as `<|python_tag|>brave_search.call(…)`) and its result render, and none of the
    markup reaches the answer."""
    search = {"type": "function", "function": {"name": "brave_search",
                                               "description": "Web search",
                                               "parameters": SEARCH}}
    async with client:
        response = await client.post("/v1/chat/completions", json={
            "model": MODEL, "max_tokens": 8, "temperature": 0,
            "tools": [*CHAT_TOOLS, search],
            "messages": [
                {"role": "user", "content": "The news?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_2", "type": "function", "function": {
                        "name": "brave_search", "arguments": '{"query": "news"}'}}]},
                {"role": "tool", "tool_call_id": "call_2", "content": "Nothing new."}]})
    assert response.status_code == 200, response.text
    message = response.json()["choices"][0]["message"]
    for marker in MARKUP:
        assert marker not in (message.get("content") or ""), (marker, message)
