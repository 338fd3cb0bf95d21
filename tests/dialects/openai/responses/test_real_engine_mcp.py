"""Remote MCP tools on `/v1/responses` with the REAL engine (SmolLM2-135M, greedy) and a
real MCP server, through the official openai SDK with strict validation: a call the
model is made to make (a named MCP tool_choice, grammar-constrained) runs on the
server and the model answers; and the approval round trip across two requests."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from parlance.integrations.settings import IntegrationSettings
from tests.support import mcp_server
from tests.support.real_engine import MODEL_ID, asgi_client, make_app, never_ending

pytestmark = pytest.mark.model
CHOICE = {"type": "mcp", "server_label": "huggingface", "name": "model_search"}


@pytest.fixture(scope="module")
def mcp() -> Iterator[mcp_server.RunningServer]:
    server = mcp_server.start()
    yield server
    server.stop()


def sdk(llama) -> openai.AsyncOpenAI:
    app = make_app(llama, integrations=IntegrationSettings(
        allow_request_servers=True, allowed_hosts=("127.0.0.1",)))
    return openai.AsyncOpenAI(base_url="http://parlance.test/v1", api_key="unused",
                              http_client=asgi_client(app),
                              _strict_response_validation=True, max_retries=0)


def tool(mcp, **extra) -> dict:
    return {"type": "mcp", "server_label": "huggingface", "server_url": mcp.url,
            "allowed_tools": ["model_search"], **extra}


async def test_forced_mcp_call_runs_and_the_model_answers(llama, mcp):
    mcp_server.RAN.clear()
    ask = {"model": MODEL_ID, "input": "Find the top trending model.", "temperature": 0,
           "max_output_tokens": 60, "tools": [tool(mcp, require_approval="never")],
           "tool_choice": CHOICE, "parallel_tool_calls": False}
    # the model answers after the call, however briefly it would: up to the cap
    with never_ending(llama):
        async with sdk(llama) as client, client.responses.stream(**ask) as stream:
            events = [event async for event in stream]
    kinds = [event.type for event in events]
    assert kinds[-1] == "response.incomplete"
    final = events[-1].response
    assert final.incomplete_details.reason == "max_output_tokens"
    assert [item.type for item in final.output][:2] == ["mcp_list_tools", "mcp_call"]
    call = final.output[1]
    assert call.name == "model_search" and "Showing first" in call.output
    assert isinstance(json.loads(call.arguments), dict)
    assert mcp_server.RAN == ["model_search"]
    assert final.output[-1].type == "message" and final.output_text  # answered after it
    assert kinds.index("response.mcp_call.completed") < kinds.index("response.output_text.delta")


async def test_approval_round_trip_on_the_real_engine(llama, mcp):
    mcp_server.RAN.clear()
    base = {"model": MODEL_ID, "temperature": 0, "max_output_tokens": 60,
            "tools": [tool(mcp)], "parallel_tool_calls": False}
    async with sdk(llama) as client:
        first = await client.responses.create(**base, input="Find the top trending model.",
                                              tool_choice=CHOICE)
        asked = first.output[-1]
        assert asked.type == "mcp_approval_request" and asked.name == "model_search"
        assert mcp_server.RAN == []
        with never_ending(llama):
            second = await client.responses.create(
                **base, previous_response_id=first.id,
                input=[{"type": "mcp_approval_response", "approval_request_id": asked.id,
                        "approve": True}])
    assert second.output[0].type == "mcp_call"
    assert second.output[0].approval_request_id == asked.id
    assert mcp_server.RAN == ["model_search"]
    assert second.output[-1].type == "message" and second.output_text
