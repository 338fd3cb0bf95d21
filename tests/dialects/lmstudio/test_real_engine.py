"""LM Studio's `/api/v1/chat` on the REAL engine (SmolLM2-135M, greedy): the event
contract with real prompt-processing progress, stream/non-stream parity, a stored
chat continued; the server-side tool loop with a real MCP server; and a cold model
loaded just in time with llama.cpp's own load progress."""

from __future__ import annotations

import asyncio

import pytest

from parlance.core.events import ToolResult
from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest
from parlance.core.tools import ToolChoice, ToolProvider, ToolServerRef
from parlance.integrations.loop import ToolLoop
from parlance.integrations.settings import IntegrationSettings
from parlance.integrations.toolbox import Toolbox
from parlance.models.registry import ModelSpec, builtin_registry
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support import mcp_server
from tests.support.lmstudio_contract import check_result, checked_events
from tests.support.real_engine import GREEDY, MODEL_ID, Run, asgi_client, make_app, never_ending

pytestmark = pytest.mark.model
CHAT = "/api/v1/chat"
ASK = {"model": MODEL_ID, "input": "Name three colors.", "temperature": 0,
       "max_output_tokens": 24}


async def test_stream_contract_and_parity(llama):
    async with asgi_client(make_app(llama)) as http:
        with never_ending(llama):
            streamed = (await http.post(CHAT, json={**ASK, "stream": True})).text
            plain = (await http.post(CHAT, json=ASK)).json()
    events = checked_events(streamed)
    names = [name for name, _ in events]
    assert names[:2] == ["chat.start", "prompt_processing.start"]
    assert names.index("prompt_processing.end") < names.index("message.start")
    assert [d["progress"] for n, d in events if n == "prompt_processing.progress"][-1] == 1.0
    result = events[-1][1]["result"]
    check_result(plain, stored=True)
    text = "".join(d["content"] for n, d in events if n == "message.delta")
    assert text and result["output"] == plain["output"] == [{"type": "message", "content": text}]
    assert result["stats"]["total_output_tokens"] == plain["stats"]["total_output_tokens"] > 0
    assert result["stats"]["tokens_per_second"] > 0


async def test_stored_chat_continues_with_the_earlier_turn(llama):
    async with asgi_client(make_app(llama)) as http:
        first = (await http.post(CHAT, json=ASK)).json()
        second = (await http.post(CHAT, json={**ASK, "input": "One more.",
                                              "previous_response_id": first["response_id"]}))
    body = second.json()
    check_result(body, stored=True)
    # the second prompt holds the first exchange: many more input tokens
    assert body["stats"]["input_tokens"] > first["stats"]["input_tokens"] + 20


async def test_tool_loop_on_the_real_engine_with_a_real_mcp_server(llama):
    """SmolLM2 does not call tools by itself, so the first round is forced
    (tool_choice required, grammar-constrained); the loop runs the call on the MCP
    server, feeds the result back and lets the model answer."""
    server = mcp_server.start()
    try:
        ref = ToolServerRef(ToolProvider("ephemeral_mcp", "huggingface"), server.url,
                            ("model_search",))
        toolbox = await Toolbox.open((ref,), IntegrationSettings(
            allow_request_servers=True, allowed_hosts=("127.0.0.1",)))
        request = GenerationRequest(
            model=MODEL_ID, sampling=GREEDY, max_tokens=60, tools=toolbox.specs(),
            tool_choice=ToolChoice("required"), parallel_tool_calls=False,
            prompts=(ChatInput((Message("user", "Find the top trending model."),)),))
        with never_ending(llama):  # the answer after the call runs to max_tokens
            first = await llama.start(request)
            loop = ToolLoop(first, request, toolbox, llama.start)
            try:
                events = await asyncio.wait_for(_drain(loop), 120)
            finally:
                loop.cancel()
                await toolbox.aclose()
        outcome = Run(events, first.prompts[0].text, first.prompts[0].n_tokens)
    finally:
        server.stop()
    results = [e for e in outcome.events if isinstance(e, ToolResult)]
    assert len(results) == 1 and "Showing first" in results[0].output
    assert outcome.finish == "length" and outcome.text  # the model answered after the call
    assert outcome.usage.prompt_tokens > 2 * outcome.prompt_tokens  # two rounds of prompt
    assert outcome.result.choice(0).tool_calls[0].name == "model_search"


async def _drain(generation) -> list:
    return [event async for event in generation]


async def test_cold_model_loads_with_real_progress(real_llama_engine, tmp_path):
    """A second model key (the same GGUF) is loaded just in time on the real engine."""
    from parlance.cli.wiring import engine_loader, load_defaults
    from parlance.config import ServeConfig

    spec = builtin_registry()[MODEL_ID]
    cold = ModelSpec(id="local/smol-copy", locate=spec.locate, ctx_size=1024)
    config = ServeConfig(parallel=1, threads=2)
    models = ServedModels([ServedModel(spec, real_llama_engine, 0)], catalog=lambda: [cold],
                          loader=engine_loader(config), defaults=load_defaults(config))
    app = create_app(models, ServerSettings())
    try:
        async with asgi_client(app) as http:
            streamed = (await http.post(CHAT, json={**ASK, "model": "local/smol-copy",
                                                    "stream": True})).text
        events = checked_events(streamed)
        progress = [d["progress"] for n, d in events if n == "model_load.progress"]
        assert len(progress) >= 3 and progress == sorted(progress) and progress[-1] == 1.0
        loaded = [d for n, d in events if n == "model_load.end"][0]["load_time_seconds"]
        assert loaded > 0
        assert events[-1][1]["result"]["stats"]["model_load_time_seconds"] == loaded
        assert events[-1][1]["result"]["output"][0]["content"]
    finally:
        await models.unload("local/smol-copy")
