"""Server-side MCP tools on `/api/v1/chat`, against a real MCP server on loopback
(the official SDK's server): the tool loop, its events and output items,
failures, transports, and the operator's rules (per-request servers, SSRF)."""

from __future__ import annotations

import sys

import httpx
import pytest

from parlance.core.events import (
    Finish,
    FinishReason,
    PromptProgress,
    ReasoningDelta,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from parlance.engines.fake import FakeEngine, Generated
from parlance.integrations.settings import ConfiguredServer, IntegrationSettings
from tests.support import mcp_server
from tests.support.fake_app import make_app
from tests.support.lmstudio_contract import check_error, check_result, checked_events
from tests.support.transcripts import assert_transcript

CHAT = "/api/v1/chat"
SEARCH_CALL = ('<tool_call>\n{"name": "model_search", "arguments": '
               '{"sort": "trendingScore", "limit": 1}}\n</tool_call>')
ANSWER = "The current top-trending model is SmolLM2."


def settings(**overrides) -> IntegrationSettings:
    base = dict(allow_request_servers=True, allowed_hosts=("127.0.0.1",))
    return IntegrationSettings(**{**base, **overrides})


def integration(mcp, **extra) -> dict:
    return {"type": "ephemeral_mcp", "server_label": "huggingface", "server_url": mcp.url,
            **extra}


def body(mcp, **extra) -> dict:
    return {"model": "fake-model", "input": "What is the top trending model on hugging face?",
            "integrations": [integration(mcp, allowed_tools=["model_search"])], **extra}


def enqueue_seed_exchange(engine: FakeEngine) -> None:
    """Seed 000: reasoning, a model_search call, then the answer."""
    engine.enqueue(PromptProgress(329, 329), ReasoningDelta("Need to call function."),
                   Generated(SEARCH_CALL), Finish(FinishReason.STOP), Usage(329, 40, 0.5, 1.0, 5))
    engine.enqueue(PromptProgress(380, 400), PromptProgress(400, 400), TextDelta(ANSWER),
                   Finish(FinishReason.STOP), Usage(400, 10, 0.2, 0.3))


SEED_EVENTS = [
    "chat.start", "prompt_processing.start", "prompt_processing.progress",
    "prompt_processing.end", "reasoning.start", "reasoning.delta", "reasoning.end",
    "tool_call.start", "tool_call.arguments", "tool_call.success", "prompt_processing.start",
    "prompt_processing.progress", "prompt_processing.progress", "prompt_processing.end",
    "message.start", "message.delta", "message.end", "chat.end"]
SEARCH_OUTPUT = ('[{"type":"text","text":"Showing first 1 models sorted by trendingScore: '
                 'HuggingFaceTB/SmolLM2-135M"}]')


async def test_seed_exchange_streams_every_tool_event(mcp_client, fake_engine, mcp, fixed_ids):
    enqueue_seed_exchange(fake_engine)
    response = await mcp_client.post(CHAT, json=body(mcp, stream=True))
    events = checked_events(response.text)
    assert [name for name, _ in events] == SEED_EVENTS
    provider = {"type": "ephemeral_mcp", "server_label": "huggingface"}
    by_name = dict(events)
    assert by_name["tool_call.start"] == {"type": "tool_call.start", "tool": "model_search",
                                          "provider_info": provider}
    arguments = {"sort": "trendingScore", "limit": 1}
    assert by_name["tool_call.arguments"]["arguments"] == arguments
    assert by_name["tool_call.success"] == {
        "type": "tool_call.success", "tool": "model_search", "arguments": arguments,
        "output": SEARCH_OUTPUT, "provider_info": provider}
    result = events[-1][1]["result"]
    assert result["output"] == [
        {"type": "reasoning", "content": "Need to call function."},
        {"type": "tool_call", "tool": "model_search", "arguments": arguments,
         "output": SEARCH_OUTPUT, "provider_info": provider},
        {"type": "message", "content": ANSWER}]
    assert result["stats"]["input_tokens"] == 729 and result["stats"]["total_output_tokens"] == 50
    assert result["stats"]["time_to_first_token_seconds"] == 0.5
    # only the allowed tool was offered; the result went back to the model
    first, second = fake_engine.requests
    assert [t.name for t in first.tools] == ["model_search"]
    said, answered = second.prompts[0].messages[-2:]
    assert said.role == "assistant" and said.tool_calls[0].name == "model_search"
    assert answered.role == "tool" and answered.content == SEARCH_OUTPUT
    assert answered.tool_call_id == said.tool_calls[0].id
    assert_transcript("lmstudio_chat_mcp_tool_call.sse", response.text)


async def test_non_stream_matches_the_stream(mcp_client, fake_engine, mcp):
    enqueue_seed_exchange(fake_engine)
    streamed = checked_events((await mcp_client.post(CHAT, json=body(mcp, stream=True))).text)
    enqueue_seed_exchange(fake_engine)
    result = (await mcp_client.post(CHAT, json=body(mcp))).json()
    check_result(result, stored=True)
    streamed_result = streamed[-1][1]["result"]
    assert {**streamed_result, "response_id": None} == {**result, "response_id": None}


async def test_unknown_tool_is_an_invalid_name_failure(mcp_client, fake_engine, mcp):
    fake_engine.enqueue(ToolCallStart("call_1", "open_browser"), ToolCallArgs("{}"),
                        ToolCallEnd(), Finish(FinishReason.TOOL_CALLS), Usage(10, 5))
    fake_engine.enqueue(TextDelta("I cannot browse."), Finish(FinishReason.STOP), Usage(20, 4))
    events = checked_events((await mcp_client.post(CHAT, json=body(mcp, stream=True))).text)
    names = [name for name, _ in events]
    assert "tool_call.start" not in names
    failure = dict(events)["tool_call.failure"]
    assert failure == {"type": "tool_call.failure",
                       "reason": "Cannot find tool with name open_browser.",
                       "metadata": {"type": "invalid_name", "tool_name": "open_browser"}}
    output = events[-1][1]["result"]["output"]
    assert output[0] == {"type": "invalid_tool_call", "reason": failure["reason"],
                         "metadata": failure["metadata"]}
    assert output[1] == {"type": "message", "content": "I cannot browse."}
    told = fake_engine.requests[-1].prompts[0].messages[-1]
    assert told.role == "tool" and "Cannot find tool" in told.content


async def test_bad_arguments_are_an_invalid_arguments_failure(mcp_client, fake_engine, mcp):
    fake_engine.enqueue(Generated('<tool_call>\n{"name": "model_search", "arguments": '
                                  '{"sort": 5}}\n</tool_call>'), Finish(FinishReason.STOP),
                        Usage(10, 5))
    fake_engine.enqueue(TextDelta("Sorry."), Finish(FinishReason.STOP), Usage(20, 2))
    events = checked_events((await mcp_client.post(CHAT, json=body(mcp, stream=True))).text)
    names = [name for name, _ in events]
    at = names.index("tool_call.start")
    assert names[at:at + 3] == ["tool_call.start", "tool_call.arguments", "tool_call.failure"]
    metadata = dict(events)["tool_call.failure"]["metadata"]
    assert metadata == {"type": "invalid_arguments", "tool_name": "model_search",
                        "arguments": {"sort": 5},
                        "provider_info": {"type": "ephemeral_mcp",
                                          "server_label": "huggingface"}}
    assert "sort" in dict(events)["tool_call.failure"]["reason"]


async def test_a_failing_tool_reports_its_error_output_to_the_model(mcp_client, fake_engine, mcp):
    fake_engine.enqueue(Generated('<tool_call>\n{"name": "explode", "arguments": {}}\n'
                                  '</tool_call>'), Finish(FinishReason.STOP), Usage(10, 5))
    fake_engine.enqueue(TextDelta("It failed."), Finish(FinishReason.STOP), Usage(20, 2))
    result = (await mcp_client.post(CHAT, json={**body(mcp), "integrations": [integration(mcp)]}))
    output = result.json()["output"]
    assert output[0]["type"] == "tool_call" and "Error executing tool explode" in output[0][
        "output"]
    assert output[1] == {"type": "message", "content": "It failed."}


async def test_round_cap_makes_the_model_answer(fake_engine, mcp):
    app = make_app(fake_engine, integrations=settings(max_rounds=1))
    fake_engine.enqueue(Generated(SEARCH_CALL), Finish(FinishReason.STOP), Usage(10, 5))
    fake_engine.enqueue(TextDelta("Done."), Finish(FinishReason.STOP), Usage(20, 2))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        assert (await client.post(CHAT, json=body(mcp))).status_code == 200
    assert fake_engine.requests[0].tool_choice.mode == "auto"
    assert fake_engine.requests[1].tool_choice.mode == "none"


async def test_headers_reach_the_server_and_sse_transport_works(mcp_client, fake_engine, mcp):
    enqueue_seed_exchange(fake_engine)
    sse = integration(mcp, server_url=mcp.sse_url, headers={"Authorization": "Bearer hf_x"})
    response = await mcp_client.post(CHAT, json={**body(mcp), "integrations": [sse]})
    assert response.status_code == 200, response.text
    assert response.json()["output"][1]["output"] == SEARCH_OUTPUT
    assert "Bearer hf_x" in mcp.headers.seen


async def test_unreachable_server_is_an_mcp_connection_error(mcp_client):
    gone = {"type": "ephemeral_mcp", "server_label": "gone",
            "server_url": f"http://127.0.0.1:{mcp_server.free_port()}/mcp"}
    for stream in (False, True):
        response = await mcp_client.post(CHAT, json={"model": "fake-model", "input": "hi",
                                                 "integrations": [gone], "stream": stream})
        assert response.status_code == 400
        error = response.json()["error"]
        check_error(error)
        assert error["type"] == "mcp_connection_error"
        assert error["param"] == "integrations[0]" and "gone" in error["message"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "10.1.2.3", "192.168.1.20",
                                  "169.254.169.254", "[::1]"])
async def test_private_addresses_are_refused_unless_allow_listed(fake_engine, host):
    app = make_app(fake_engine, integrations=IntegrationSettings(allow_request_servers=True))
    target = {"type": "ephemeral_mcp", "server_label": "local",
              "server_url": f"http://{host}:9/mcp"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        response = await client.post(CHAT, json={"model": "fake-model", "input": "hi",
                                                 "integrations": [target]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "mcp_connection_error" and "non-public address" in error["message"]
    assert fake_engine.requests == []


async def test_per_request_servers_are_off_by_default(fake_engine, mcp):
    app = make_app(fake_engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        response = await client.post(CHAT, json=body(mcp))
    assert response.status_code == 400
    assert "--allow-request-mcp" in response.json()["error"]["message"]


async def test_configured_plugins_over_http_and_stdio(fake_engine, mcp):
    configured = {
        "hub": ConfiguredServer("hub", url=mcp.url),
        "local": ConfiguredServer("local", command=sys.executable,
                                  args=("-m", "tests.support.mcp_server")),
    }
    app = make_app(fake_engine, integrations=IntegrationSettings(configured=configured))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        for plugin in ("mcp/hub", {"type": "plugin", "id": "mcp/local",
                                   "allowed_tools": ["model_search"]}):
            enqueue_seed_exchange(fake_engine)
            response = await client.post(CHAT, json={
                "model": "fake-model", "input": "top model?", "integrations": [plugin]})
            assert response.status_code == 200, response.text
            call = response.json()["output"][1]
            label = plugin if isinstance(plugin, str) else plugin["id"]
            assert call["provider_info"] == {"type": "plugin", "plugin_id": label}
            assert call["output"] == SEARCH_OUTPUT
        unknown = await client.post(CHAT, json={"model": "fake-model", "input": "x",
                                                "integrations": ["mcp/nope"]})
    assert unknown.status_code == 400
    assert unknown.json()["error"]["type"] == "plugin_connection_error"


async def test_tool_choice_extension_reaches_the_engine(mcp_client, fake_engine, mcp):
    enqueue_seed_exchange(fake_engine)
    await mcp_client.post(CHAT, json=body(mcp, tool_choice="required", parallel_tool_calls=False))
    first, second = fake_engine.requests
    assert first.tool_choice.mode == "required" and not first.parallel_tool_calls
    assert second.tool_choice.mode == "auto"  # once called, the model may answer


def rebinding(first: str, then: str):
    """A resolver that answers `first` once, then `then` (a DNS rebinding attack)."""
    answers = iter([first])

    async def resolve(host: str, port: int) -> list[str]:
        assert host == "rebind.test"
        return [next(answers, then)]

    return resolve


async def test_dns_rebinding_is_refused_when_connecting(mcp_client, fake_engine, mcp, monkeypatch):
    monkeypatch.setattr("parlance.net.guard.resolve", rebinding("93.184.216.34", "127.0.0.1"))
    target = integration(mcp, server_url=f"http://rebind.test:{mcp.port}/mcp")
    response = await mcp_client.post(CHAT, json={**body(mcp), "integrations": [target]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "mcp_connection_error" and "non-public address" in error["message"]
    assert fake_engine.requests == []


async def test_connections_go_to_the_checked_address(mcp_client, fake_engine, mcp, monkeypatch):
    """Control for the test above: with every address taken as public, the client
    connects to the address the guard resolved (the name itself resolves nowhere)."""
    monkeypatch.setattr("parlance.net.guard.resolve", rebinding("127.0.0.1", "127.0.0.1"))
    monkeypatch.setattr("parlance.net.guard.is_public_address", lambda a: True)
    enqueue_seed_exchange(fake_engine)
    target = integration(mcp, server_url=f"http://rebind.test:{mcp.port}/mcp")
    response = await mcp_client.post(CHAT, json={**body(mcp), "integrations": [target]})
    assert response.status_code == 200, response.text
    assert response.json()["output"][1]["output"] == SEARCH_OUTPUT
