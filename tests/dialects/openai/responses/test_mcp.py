"""Remote MCP tools on `/v1/responses`, against a real MCP server on loopback: the
`mcp_list_tools`, `mcp_call` and approval items and their stream events (checked
with the openai SDK's own types), the approval round trip across turns, and the
errors."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai._models import validate_type
from openai.types.responses import Response, ResponseStreamEvent

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
from parlance.integrations.settings import ConfiguredServer, IntegrationSettings
from tests.support import mcp_server
from tests.support.fake_app import make_app
from tests.support.sse import sse_data

RESPONSES = "/v1/responses"
SEARCH_CALL = ('<tool_call>\n{"name": "model_search", "arguments": '
               '{"sort": "trendingScore", "limit": 1}}\n</tool_call>')
ADD_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}}\n</tool_call>'
ANSWER = "The current top-trending model is SmolLM2."
SEARCH_OUTPUT = ('[{"type":"text","text":"Showing first 1 models sorted by trendingScore: '
                 'HuggingFaceTB/SmolLM2-135M"}]')
LISTED = ["response.output_item.added", "response.mcp_list_tools.in_progress",
          "response.mcp_list_tools.completed", "response.output_item.done"]
CALLED = ["response.output_item.added", "response.mcp_call.in_progress",
          "response.mcp_call_arguments.delta", "response.mcp_call_arguments.done",
          "response.mcp_call.completed", "response.output_item.done"]
ANSWERED = ["response.output_item.added", "response.content_part.added",
            "response.output_text.delta", "response.output_text.done",
            "response.content_part.done", "response.output_item.done"]


def hub(mcp, **extra) -> dict[str, Any]:
    return {"type": "mcp", "server_label": "huggingface", "server_url": mcp.url, **extra}


def ask(mcp, **extra) -> dict[str, Any]:
    tool = hub(mcp, allowed_tools=["model_search"], require_approval="never")
    return {"model": "fake-model", "input": "What is the top trending model?",
            "tools": [tool], **extra}


def enqueue_search(engine: FakeEngine) -> None:
    engine.enqueue(Generated(SEARCH_CALL), Finish(FinishReason.STOP), Usage(30, 10))
    enqueue_answer(engine)


def enqueue_answer(engine: FakeEngine) -> None:
    engine.enqueue(TextDelta(ANSWER), Finish(FinishReason.STOP), Usage(60, 8))


def checked(text: str) -> list[tuple[str, dict[str, Any]]]:
    """The stream's events, each validated as the openai SDK's own event type."""
    events = []
    for payload in sse_data(text):
        if payload == "[DONE]":
            continue
        validate_type(type_=ResponseStreamEvent, value=payload)  # type: ignore[arg-type]
        events.append((payload["type"], payload))
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    return events


def checked_body(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    validate_type(type_=Response, value=body)
    return body


async def test_stream_lists_the_tools_runs_the_call_then_answers(mcp_client, fake_engine, mcp):
    enqueue_search(fake_engine)
    events = checked((await mcp_client.post(RESPONSES, json=ask(mcp, stream=True))).text)
    names = [name for name, _ in events]
    assert names == ["response.created", "response.in_progress", *LISTED, *CALLED,
                     *ANSWERED, "response.completed"]
    listing = events[5][1]["item"]
    assert listing["type"] == "mcp_list_tools" and listing["server_label"] == "huggingface"
    assert [t["name"] for t in listing["tools"]] == ["model_search"]
    assert listing["tools"][0]["input_schema"]["required"] == ["sort"]
    added = events[6][1]["item"]
    assert added["type"] == "mcp_call" and added["status"] == "in_progress"
    assert added["arguments"] == "" and added["output"] is None
    call = events[11][1]["item"]
    assert call["id"] == added["id"] and call["status"] == "completed"
    assert json.loads(call["arguments"]) == {"sort": "trendingScore", "limit": 1}
    assert call["output"] == SEARCH_OUTPUT and call["error"] is None
    final = events[-1][1]["response"]
    assert [i["type"] for i in final["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert final["output"][2]["content"][0]["text"] == ANSWER
    assert final["usage"]["input_tokens"] == 90 and final["usage"]["output_tokens"] == 18
    # the result went back to the model as the tool's answer
    said, answered = fake_engine.requests[1].prompts[0].messages[-2:]
    assert said.tool_calls[0].name == "model_search" and answered.content == SEARCH_OUTPUT


async def test_non_stream_and_the_sdk_stream_helper_agree(mcp_client, fake_engine, mcp):
    enqueue_search(fake_engine)
    body = checked_body(await mcp_client.post(RESPONSES, json=ask(mcp)))
    assert [i["type"] for i in body["output"]] == ["mcp_list_tools", "mcp_call", "message"]
    assert body["output"][1]["output"] == SEARCH_OUTPUT
    assert body["tools"] == [{"type": "mcp", "server_label": "huggingface",
                              "server_url": mcp.url, "allowed_tools": ["model_search"],
                              "require_approval": "never"}]
    enqueue_search(fake_engine)
    sdk = openai.AsyncOpenAI(base_url="http://t/v1", api_key="x", http_client=mcp_client,
                             _strict_response_validation=True, max_retries=0)
    request = ask(mcp)
    async with sdk.responses.stream(**request) as stream:
        final = await stream.get_final_response()
    assert [i.type for i in final.output] == ["mcp_list_tools", "mcp_call", "message"]
    assert final.output[1].output == SEARCH_OUTPUT and final.output_text == ANSWER
    # stored: replayed as the same stream
    replayed = checked((await mcp_client.get(f"{RESPONSES}/{final.id}?stream=true")).text)
    assert [n for n, _ in replayed] == ["response.created", "response.in_progress", *LISTED,
                                        *CALLED, *ANSWERED, "response.completed"]


async def test_calls_wait_for_approval_by_default_then_run_once(mcp_client, fake_engine, mcp):
    mcp_server.RAN.clear()
    tools = [hub(mcp)]  # no require_approval: OpenAI's default is "always"
    fake_engine.enqueue(Generated(SEARCH_CALL), Finish(FinishReason.STOP), Usage(30, 10))
    first = checked_body(await mcp_client.post(RESPONSES, json={
        "model": "fake-model", "input": "Top model?", "tools": tools}))
    assert [i["type"] for i in first["output"]] == ["mcp_list_tools", "mcp_approval_request"]
    asked = first["output"][1]
    assert asked["id"].startswith("mcpr_") and asked["name"] == "model_search"
    assert json.loads(asked["arguments"]) == {"sort": "trendingScore", "limit": 1}
    assert first["status"] == "completed" and mcp_server.RAN == []

    enqueue_answer(fake_engine)
    approve = {"type": "mcp_approval_response", "approval_request_id": asked["id"],
               "approve": True}
    events = checked((await mcp_client.post(RESPONSES, json={
        "model": "fake-model", "input": [approve], "tools": tools, "stream": True,
        "previous_response_id": first["id"]})).text)
    # the tools were listed earlier in the conversation: not again
    assert [n for n, _ in events] == ["response.created", "response.in_progress", *CALLED,
                                      *ANSWERED, "response.completed"]
    second = events[-1][1]["response"]
    call = second["output"][0]
    assert call["approval_request_id"] == asked["id"] and call["output"] == SEARCH_OUTPUT
    assert mcp_server.RAN == ["model_search"]
    messages = fake_engine.requests[-1].prompts[0].messages
    assert [m.role for m in messages] == ["user", "assistant", "tool"]

    enqueue_answer(fake_engine)
    third = checked_body(await mcp_client.post(RESPONSES, json={
        "model": "fake-model", "input": "Thanks!", "tools": tools,
        "previous_response_id": second["id"]}))
    assert [i["type"] for i in third["output"]] == ["message"]
    assert mcp_server.RAN == ["model_search"]  # an approval runs its call once
    roles = [m.role for m in fake_engine.requests[-1].prompts[0].messages]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]


async def test_a_declined_call_is_shown_to_the_model_as_declined(mcp_client, fake_engine, mcp):
    mcp_server.RAN.clear()
    tools = [hub(mcp, require_approval="always")]
    fake_engine.enqueue(Generated(SEARCH_CALL), Finish(FinishReason.STOP), Usage(30, 10))
    first = checked_body(await mcp_client.post(RESPONSES, json={
        "model": "fake-model", "input": "Top model?", "tools": tools}))
    asked = first["output"][-1]
    enqueue_answer(fake_engine)
    second = checked_body(await mcp_client.post(RESPONSES, json={
        "model": "fake-model", "tools": tools, "previous_response_id": first["id"],
        "input": [{"type": "mcp_approval_response", "approval_request_id": asked["id"],
                   "approve": False, "reason": "not now"}]}))
    assert [i["type"] for i in second["output"]] == ["message"]
    assert mcp_server.RAN == []
    told = fake_engine.requests[-1].prompts[0].messages[-1]
    assert told.role == "tool" and told.content == "The user declined this tool call: not now."


async def test_approval_filters_and_read_only_tools(mcp_client, fake_engine, mcp):
    both = ["model_search", "add"]
    cases = [({"never": {"tool_names": ["add"]}}, "mcp_call"),
             ({"always": {"tool_names": ["model_search"]}}, "mcp_call"),
             ({"always": {"read_only": True}}, "mcp_call"),  # add is not read-only
             ({"never": {"read_only": True}}, "mcp_approval_request")]
    for rule, kind in cases:
        fake_engine.enqueue(Generated(ADD_CALL), Finish(FinishReason.STOP), Usage(30, 10))
        if kind == "mcp_call":
            enqueue_answer(fake_engine)
        body = checked_body(await mcp_client.post(RESPONSES, json={
            "model": "fake-model", "input": "2+3?", "stream": False,
            "tools": [hub(mcp, allowed_tools=both, require_approval=rule)]}))
        assert body["output"][1]["type"] == kind, rule
    # allowed_tools as a filter: read-only tools only
    enqueue_answer(fake_engine)
    body = checked_body(await mcp_client.post(RESPONSES, json={
        "model": "fake-model", "input": "hi",
        "tools": [hub(mcp, allowed_tools={"read_only": True})]}))
    assert [t["name"] for t in body["output"][0]["tools"]] == ["model_search"]


async def test_unknown_tool_is_a_failed_call_the_model_hears_about(mcp_client, fake_engine, mcp):
    fake_engine.enqueue(ToolCallStart("call_1", "model_search"), ToolCallArgs('{"sort": 5}'),
                        ToolCallEnd(), Finish(FinishReason.TOOL_CALLS), Usage(10, 5))
    fake_engine.enqueue(TextDelta("Sorry."), Finish(FinishReason.STOP), Usage(20, 2))
    events = checked((await mcp_client.post(RESPONSES, json=ask(mcp, stream=True))).text)
    names = [n for n, _ in events]
    assert "response.mcp_call.failed" in names and "response.mcp_call.completed" not in names
    call = next(e["item"] for n, e in events if n == "response.output_item.done"
                and e["item"]["type"] == "mcp_call")
    assert call["status"] == "failed" and call["output"] is None
    assert call["error"]["type"] == "mcp_protocol_error" and "sort" in call["error"]["message"]
    told = fake_engine.requests[-1].prompts[0].messages[-1]
    assert told.role == "tool" and "sort" in told.content


async def test_a_tool_that_reports_failure_is_a_failed_call(mcp_client, fake_engine, mcp):
    """The tool ran and answered with MCP's `isError`: the call fails with a
    `mcp_tool_execution_error` holding the tool's content, stored and read back as such."""
    fake_engine.enqueue(Generated('<tool_call>\n{"name": "explode", "arguments": {}}\n'
                                  '</tool_call>'), Finish(FinishReason.STOP), Usage(10, 5))
    fake_engine.enqueue(TextDelta("It failed."), Finish(FinishReason.STOP), Usage(20, 2))
    tool = hub(mcp, allowed_tools=["explode"], require_approval="never")
    body = {**ask(mcp), "tools": [tool]}
    events = checked((await mcp_client.post(RESPONSES, json={**body, "stream": True})).text)
    names = [n for n, _ in events]
    assert "response.mcp_call.failed" in names and "response.mcp_call.completed" not in names
    call = next(e["item"] for n, e in events if n == "response.output_item.done"
                and e["item"]["type"] == "mcp_call")
    assert call["status"] == "failed" and call["output"] is None
    assert call["error"]["type"] == "mcp_tool_execution_error"
    assert "Error executing tool explode" in call["error"]["content"][0]["text"]
    told = fake_engine.requests[-1].prompts[0].messages[-1]
    assert told.role == "tool" and told.content.startswith("Error: ")
    final = events[-1][1]["response"]
    stored = checked((await mcp_client.get(f"{RESPONSES}/{final['id']}?stream=true")).text)
    again = next(e["item"] for n, e in stored if n == "response.output_item.done"
                 and e["item"]["type"] == "mcp_call")
    assert again["status"] == "failed" and again["error"] == call["error"]


async def test_parallel_calls_open_and_close_one_item_at_a_time(mcp_client, fake_engine, mcp):
    fake_engine.enqueue(Generated(SEARCH_CALL + "\n" + ADD_CALL), Finish(FinishReason.STOP),
                        Usage(30, 20))
    enqueue_answer(fake_engine)
    tool = hub(mcp, require_approval="never")
    events = checked((await mcp_client.post(RESPONSES, json={
        "model": "fake-model", "input": "both", "tools": [tool], "stream": True})).text)
    names = [n for n, _ in events]
    assert names == ["response.created", "response.in_progress", *LISTED, *CALLED, *CALLED,
                     *ANSWERED, "response.completed"]
    outputs = [e["item"]["output"] for n, e in events if n == "response.output_item.done"
               and e["item"]["type"] == "mcp_call"]
    assert outputs[1] == '[{"type":"text","text":"5"}]'


async def test_a_configured_server_is_named_by_its_label_alone(fake_engine, mcp):
    settings = IntegrationSettings(configured={"hub": ConfiguredServer("hub", url=mcp.url)})
    app = make_app(fake_engine, integrations=settings)
    enqueue_search(fake_engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        body = checked_body(await client.post(RESPONSES, json={
            "model": "fake-model", "input": "top?",
            "tools": [{"type": "mcp", "server_label": "hub", "require_approval": "never"}]}))
    assert body["output"][1]["server_label"] == "hub"
    assert body["output"][1]["output"] == SEARCH_OUTPUT


async def test_named_mcp_tool_choice_forces_that_tool(mcp_client, fake_engine, mcp):
    enqueue_search(fake_engine)
    choice = {"type": "mcp", "server_label": "huggingface", "name": "model_search"}
    body = checked_body(await mcp_client.post(RESPONSES, json=ask(mcp, tool_choice=choice)))
    assert body["tool_choice"] == choice
    assert fake_engine.requests[0].tool_choice.name == "model_search"
    wrong = await mcp_client.post(RESPONSES, json=ask(mcp, tool_choice={**choice, "name": "nope"}))
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "tool_choice"


@pytest.mark.parametrize("tool, status, code, param", [
    ({"server_label": "x", "connector_id": "connector_dropbox"}, 400, "unsupported_parameter",
     "tools[0].connector_id"),
    ({"server_label": "x", "server_url": "http://10.0.0.8/mcp"}, 424, "mcp_connection_error",
     "tools[0]"),
    ({"server_label": "x"}, 424, "plugin_connection_error", "tools[0]"),
])
async def test_bad_servers_are_clear_errors(mcp_client, fake_engine, tool, status, code, param):
    response = await mcp_client.post(RESPONSES, json={
        "model": "fake-model", "input": "hi", "tools": [{"type": "mcp", **tool}]})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["param"] == param
    assert fake_engine.requests == []


async def test_unreachable_server_and_unknown_approval(mcp_client, fake_engine, mcp):
    gone = hub(mcp, server_url=f"http://127.0.0.1:{mcp_server.free_port()}/mcp")
    for stream in (False, True):
        response = await mcp_client.post(RESPONSES, json={
            "model": "fake-model", "input": "hi", "tools": [gone], "stream": stream})
        assert response.status_code == 424
        assert response.json()["error"]["type"] == "external_connector_error"
    stray = {"type": "mcp_approval_response", "approval_request_id": "mcpr_nope",
             "approve": True}
    response = await mcp_client.post(RESPONSES, json={"model": "fake-model", "input": [stray],
                                                  "tools": [hub(mcp)]})
    assert response.status_code == 400 and "mcpr_nope" in response.json()["error"]["message"]
    duplicate = await mcp_client.post(RESPONSES, json={"model": "fake-model", "input": "hi",
                                                   "tools": [hub(mcp), hub(mcp)]})
    assert duplicate.status_code == 400
    assert duplicate.json()["error"]["param"] == "tools[1].server_label"
    assert fake_engine.requests == []


async def test_per_request_servers_are_off_by_default(fake_engine, mcp):
    app = make_app(fake_engine)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        response = await client.post(RESPONSES, json=ask(mcp))
    assert response.status_code == 424
    assert "--allow-request-mcp" in response.json()["error"]["message"]
