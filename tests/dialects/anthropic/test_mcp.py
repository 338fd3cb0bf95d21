"""Anthropic's MCP connector (`mcp_servers` on `/v1/messages`) against a real MCP server
on loopback: the `mcp_tool_use` / `mcp_tool_result` blocks, streamed and whole, each
event and body checked by the anthropic SDK's beta types; the filters, the token, and
the operator's rules."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from anthropic.types.beta import BetaMessage

from parlance.core.events import (
    Finish,
    FinishReason,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from parlance.engines.fake import FakeEngine, Generated
from parlance.integrations.settings import IntegrationSettings
from tests.support import mcp_server
from tests.support.anthropic_contract import check_error, stream_events
from tests.support.fake_app import make_app

MESSAGES = "/v1/messages"
SEARCH_CALL = ('<tool_call>\n{"name": "model_search", "arguments": '
               '{"sort": "trendingScore", "limit": 1}}\n</tool_call>')
ADD_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
ANSWER = "The current top-trending model is SmolLM2."
SEARCH_TEXT = "Showing first 1 models sorted by trendingScore: HuggingFaceTB/SmolLM2-135M"


def hub(mcp, **extra) -> dict[str, Any]:
    return {"type": "url", "url": mcp.url, "name": "huggingface", **extra}


def ask(*servers: dict[str, Any], **extra) -> dict[str, Any]:
    return {"model": "fake-model", "max_tokens": 256, "mcp_servers": list(servers),
            "messages": [{"role": "user", "content": "What is the top trending model?"}],
            **extra}


def enqueue_search(engine: FakeEngine) -> None:
    engine.enqueue(Generated(SEARCH_CALL), Finish(FinishReason.STOP), Usage(30, 10))
    engine.enqueue(TextDelta(ANSWER), Finish(FinishReason.STOP), Usage(60, 8))


def message(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    BetaMessage.model_validate(body, strict=True)
    return body


def folded(stream: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The content blocks a stream builds, as a client folds them."""
    blocks: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    for event in stream:
        if event["type"] == "content_block_start":
            assert event["index"] == len(blocks)
            blocks.append(dict(event["content_block"]))
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            if delta["type"] == "text_delta":
                blocks[event["index"]]["text"] += delta["text"]
            elif delta["type"] == "input_json_delta":
                partial[event["index"]] = partial.get(event["index"], "") + delta["partial_json"]
    for index, text in partial.items():
        blocks[index]["input"] = json.loads(text)
    return blocks


async def test_stream_shows_the_call_and_its_result_then_the_answer(mcp_client, fake_engine, mcp):
    enqueue_search(fake_engine)
    response = await mcp_client.post(MESSAGES, json=ask(hub(mcp), stream=True))
    assert response.status_code == 200, response.text
    stream = stream_events(response.text, beta=True)
    assert [e["type"] for e in stream] == [
        "message_start", "ping",
        "content_block_start", "content_block_stop",  # mcp_tool_listing, whole
        "content_block_start", "content_block_delta", "content_block_stop",  # mcp_tool_use
        "content_block_start", "content_block_stop",  # mcp_tool_result, whole
        "content_block_start", "content_block_delta", "content_block_stop",  # the answer
        "message_delta", "message_stop"]
    listing = stream[2]["content_block"]
    assert (listing["type"], listing["mcp_server_name"]) == ("mcp_tool_listing", "huggingface")
    tools = {t["name"]: t for t in listing["tools"]}
    assert set(tools) == {"model_search", "add", "outline", "explode"}
    assert tools["add"]["input_schema"]["properties"].keys() == {"a", "b"}
    use = stream[4]["content_block"]
    assert use == {"type": "mcp_tool_use", "id": use["id"], "name": "model_search",
                   "server_name": "huggingface", "input": {}}
    assert use["id"].startswith("mcptoolu_")  # Anthropic's spelling of a connector call
    assert stream[5]["delta"]["type"] == "input_json_delta"
    assert stream[7]["content_block"] == {
        "type": "mcp_tool_result", "tool_use_id": use["id"], "is_error": False,
        "content": [{"type": "text", "text": SEARCH_TEXT}]}
    blocks = folded(stream)
    assert blocks[1]["input"] == {"sort": "trendingScore", "limit": 1}
    assert blocks[3] == {"type": "text", "text": ANSWER}
    assert stream[-2]["delta"]["stop_reason"] == "end_turn"
    assert stream[-2]["usage"]["output_tokens"] == 18
    # the result went back to the model as the tool's answer
    said, answered = fake_engine.requests[1].prompts[0].messages[-2:]
    assert said.tool_calls[0].name == "model_search" and SEARCH_TEXT in answered.content


async def test_non_stream_message_has_the_same_blocks(mcp_client, fake_engine, mcp):
    enqueue_search(fake_engine)
    streamed = folded(stream_events((await mcp_client.post(
        MESSAGES, json=ask(hub(mcp), stream=True))).text, beta=True))
    enqueue_search(fake_engine)
    body = message(await mcp_client.post(MESSAGES, json=ask(hub(mcp))))
    assert [b["type"] for b in body["content"]] == [
        "mcp_tool_listing", "mcp_tool_use", "mcp_tool_result", "text"]
    _, use, result, answer = body["content"]
    assert use["name"] == "model_search" and use["server_name"] == "huggingface"
    assert use["input"] == {"sort": "trendingScore", "limit": 1}
    assert result == {"type": "mcp_tool_result", "tool_use_id": use["id"], "is_error": False,
                      "content": [{"type": "text", "text": SEARCH_TEXT}]}
    assert answer["text"] == ANSWER and body["stop_reason"] == "end_turn"
    assert body["usage"] == {"input_tokens": 90, "cache_creation_input_tokens": 0,
                             "cache_read_input_tokens": 0, "output_tokens": 18}
    assert [{k: v for k, v in b.items() if k not in ("id", "tool_use_id")} for b in streamed] \
        == [{k: v for k, v in b.items() if k not in ("id", "tool_use_id")}
            for b in body["content"]]


async def test_parallel_calls_each_followed_by_its_result(mcp_client, fake_engine, mcp):
    fake_engine.enqueue(Generated(SEARCH_CALL + "\n" + ADD_CALL), Finish(FinishReason.STOP),
                        Usage(30, 20))
    fake_engine.enqueue(TextDelta(ANSWER), Finish(FinishReason.STOP), Usage(60, 8))
    stream = stream_events((await mcp_client.post(
        MESSAGES, json=ask(hub(mcp), stream=True))).text, beta=True)
    blocks = folded(stream)
    assert [(b["type"], b.get("name")) for b in blocks] == [
        ("mcp_tool_listing", None), ("mcp_tool_use", "model_search"), ("mcp_tool_result", None),
        ("mcp_tool_use", "add"), ("mcp_tool_result", None), ("text", None)]
    assert blocks[4]["tool_use_id"] == blocks[3]["id"]
    assert blocks[4]["content"] == [{"type": "text", "text": "5"}]


async def test_a_refused_call_is_an_error_result_the_model_hears_about(mcp_client, fake_engine,
                                                                      mcp):
    fake_engine.enqueue(ToolCallStart("call_1", "model_search"), ToolCallArgs('{"sort": 5}'),
                        ToolCallEnd(), Finish(FinishReason.TOOL_CALLS), Usage(10, 5))
    fake_engine.enqueue(TextDelta("Sorry."), Finish(FinishReason.STOP), Usage(20, 2))
    body = message(await mcp_client.post(MESSAGES, json=ask(hub(mcp))))
    result = body["content"][2]
    assert result["type"] == "mcp_tool_result" and result["is_error"] is True
    assert "sort" in result["content"][0]["text"]
    told = fake_engine.requests[-1].prompts[0].messages[-1]
    assert told.role == "tool" and "sort" in told.content


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_that_reports_failure_is_an_error_result(mcp_client, fake_engine, mcp, stream):
    """The tool ran and answered with MCP's `isError`: `is_error` on its result, and the
    model reads that the call failed."""
    fake_engine.enqueue(Generated('<tool_call>\n{"name": "explode", "arguments": {}}\n'
                                  '</tool_call>'), Finish(FinishReason.STOP), Usage(10, 5))
    fake_engine.enqueue(TextDelta("Sorry."), Finish(FinishReason.STOP), Usage(20, 2))
    response = await mcp_client.post(MESSAGES, json=ask(hub(mcp), stream=stream))
    blocks = (folded(stream_events(response.text, beta=True)) if stream
              else message(response)["content"])
    result = blocks[2]
    assert result["type"] == "mcp_tool_result" and result["is_error"] is True
    assert "Error executing tool explode" in result["content"][0]["text"]
    told = fake_engine.requests[-1].prompts[0].messages[-1]
    assert told.role == "tool" and told.content.startswith("Error: ")


async def test_allowed_tools_enabled_and_the_token(mcp_client, fake_engine, mcp):
    fake_engine.enqueue(TextDelta("ok"), Finish(FinishReason.STOP), Usage(5, 1))
    only_add = hub(mcp, authorization_token="hf_secret",
                   tool_configuration={"allowed_tools": ["add"]})
    body = message(await mcp_client.post(MESSAGES, json=ask(only_add)))
    assert [t.name for t in fake_engine.requests[-1].tools] == ["add"]
    assert "Bearer hf_secret" in mcp.headers.seen
    assert "hf_secret" not in json.dumps(body)
    fake_engine.enqueue(TextDelta("ok"), Finish(FinishReason.STOP), Usage(5, 1))
    hidden = hub(mcp, tool_configuration={"enabled": False})
    message(await mcp_client.post(MESSAGES, json=ask(hidden)))
    assert fake_engine.requests[-1].tools == ()
    assert fake_engine.requests[-1].tool_servers == ()


@pytest.mark.parametrize("stream", [False, True])
async def test_an_unreachable_server_is_a_400_before_anything_streams(mcp_client, fake_engine,
                                                                       mcp, stream):
    gone = hub(mcp, url=f"http://127.0.0.1:{mcp_server.free_port()}/mcp")
    response = await mcp_client.post(MESSAGES, json=ask(gone, stream=stream))
    assert response.status_code == 400, response.text
    error = check_error(response.json())
    assert error["type"] == "invalid_request_error" and "huggingface" in error["message"]
    assert fake_engine.requests == []


async def test_bad_servers_are_400s(mcp_client, fake_engine, mcp):
    for servers, words in [([hub(mcp), hub(mcp)], "unique"),
                           ([{"type": "url", "name": "x"}], "url"),
                           ([{**hub(mcp), "type": "stdio"}], "type")]:
        response = await mcp_client.post(MESSAGES, json=ask(*servers))
        assert response.status_code == 400, response.text
        error = check_error(response.json())
        assert error["type"] == "invalid_request_error" and words in error["message"]
    assert fake_engine.requests == []


async def test_operator_rules_per_request_servers_and_private_addresses(fake_engine, mcp):
    for settings, words in [(IntegrationSettings(), "--allow-request-mcp"),
                            (IntegrationSettings(allow_request_servers=True), "127.0.0.1")]:
        app = make_app(fake_engine, integrations=settings)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://t") as c:
            response = await c.post(MESSAGES, json=ask(hub(mcp), stream=True))
        assert response.status_code == 400, response.text
        error = check_error(response.json())
        assert error["type"] == "invalid_request_error" and words in error["message"]
    assert fake_engine.requests == []


async def test_the_next_turn_reads_the_calls_back_as_the_model_made_them(mcp_client, fake_engine,
                                                                        mcp):
    enqueue_search(fake_engine)
    first = message(await mcp_client.post(MESSAGES, json=ask(hub(mcp))))
    fake_engine.enqueue(TextDelta("You're welcome."), Finish(FinishReason.STOP), Usage(9, 3))
    follow_up = ask(hub(mcp))
    listing = {"type": "mcp_tool_listing", "mcp_server_name": "huggingface", "tools": []}
    follow_up["messages"] += [{"role": "assistant", "content": [listing, *first["content"]]},
                              {"role": "user", "content": "Thanks!"}]
    message(await mcp_client.post(MESSAGES, json=follow_up))
    said = fake_engine.requests[-1].prompts[0].messages
    assert [m.role for m in said] == ["user", "assistant", "tool", "assistant", "user"]
    call = said[1].tool_calls[0]
    assert call.name == "model_search" and call.id == first["content"][1]["id"]
    assert json.loads(call.arguments) == {"sort": "trendingScore", "limit": 1}
    assert said[2].tool_call_id == call.id and said[2].content == SEARCH_TEXT
    assert said[3].content == ANSWER and said[4].content == "Thanks!"


async def test_count_tokens_counts_the_servers_tools_under_the_same_rules(mcp_client, fake_engine,
                                                                         mcp, monkeypatch):
    counted: list[Any] = []
    count = fake_engine.count_tokens

    async def counting(request):
        counted.append(request)
        return await count(request)

    monkeypatch.setattr(fake_engine, "count_tokens", counting)
    body = {k: v for k, v in ask(hub(mcp, tool_configuration={"allowed_tools": ["add"]})).items()
            if k != "max_tokens"}
    response = await mcp_client.post(MESSAGES + "/count_tokens", json=body)
    assert response.status_code == 200, response.text
    assert [t.name for t in counted[0].tools] == ["add"]
    gone = hub(mcp, url=f"http://127.0.0.1:{mcp_server.free_port()}/mcp")
    body["mcp_servers"] = [gone]
    refused = await mcp_client.post(MESSAGES + "/count_tokens", json=body)
    assert refused.status_code == 400, refused.text
    assert check_error(refused.json())["type"] == "invalid_request_error"
