"""A tool result must answer a call the conversation holds, as the APIs that name their
calls require: Chat refuses a `tool` message whose `tool_call_id` no earlier assistant
`tool_calls` holds; Responses an output item whose `call_id` no earlier call has, in its
input or in the stored `previous_response_id` chain; Anthropic a `tool_result` whose
`tool_use_id` the assistant turn just before it does not hold. Each is a 400 in the
dialect's envelope, before the model runs. Ollama names no calls (its tool messages
carry at most the tool's name) and takes any tool message, as Ollama does."""

from __future__ import annotations

from typing import Any

import pytest

from parlance.core.messages import Message, ToolCall, unanswered_result
from tests.support.anthropic_contract import check_error

WEATHER_CALL = {"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}


def test_unanswered_results_are_found_in_order():
    call = ToolCall("call_1", "f", "{}")
    assert unanswered_result([Message("user", "x"), Message("assistant", tool_calls=(call,)),
                              Message("tool", "1", tool_call_id="call_1"),
                              Message("tool", "2", tool_call_id="call_1")]) is None
    assert unanswered_result([Message("tool", "1", tool_call_id="call_1"),
                              Message("assistant", tool_calls=(call,))]) == (0, "call_1")
    assert unanswered_result([Message("assistant", tool_calls=(call,)),
                              Message("tool", "2", tool_call_id="call_2")]) == (1, "call_2")
    assert unanswered_result([Message("tool", "no id")]) is None  # Ollama's: not judged


# -- Chat Completions -----------------------------------------------------------------


def _chat(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"model": "fake-model", "messages": [{"role": "user", "content": "Weather?"},
                                                *messages]}


async def test_chat_refuses_a_tool_message_for_no_call(client, fake_engine):
    answered = await client.post("/v1/chat/completions", json=_chat(
        {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"}))
    assert answered.status_code == 200, answered.text
    for earlier in ([], [{"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]}]):
        refused = await client.post("/v1/chat/completions", json=_chat(
            *earlier, {"role": "tool", "tool_call_id": "call_9", "content": "Sunny"}))
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert error["param"] == f"messages[{1 + len(earlier)}].tool_call_id"
        assert "'call_9' not found in 'tool_calls'" in error["message"]
    assert len(fake_engine.requests) == 1  # the model never ran for the refused ones


# -- Responses --------------------------------------------------------------------------


FUNCTION_CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                 "arguments": '{"city": "Oslo"}'}


def _output(call_id: str, kind: str = "function_call_output") -> dict[str, Any]:
    return {"type": kind, "call_id": call_id, "output": "Sunny"}


@pytest.mark.parametrize("stream", [False, True])
async def test_responses_refuses_an_output_for_no_call(client, fake_engine, stream):
    answered = await client.post("/v1/responses", json={
        "model": "fake-model", "stream": stream,
        "input": [{"role": "user", "content": "Weather?"}, FUNCTION_CALL, _output("call_1")]})
    assert answered.status_code == 200, answered.text
    for kind, words in (("function_call_output", "function call output"),
                        ("custom_tool_call_output", "custom tool call output")):
        refused = await client.post("/v1/responses", json={
            "model": "fake-model", "stream": stream,
            "input": [{"role": "user", "content": "Weather?"}, _output("call_9", kind)]})
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"] == {
            "message": f"No tool call found for {words} with call_id call_9.",
            "type": "invalid_request_error", "param": "input", "code": None}
    assert len(fake_engine.requests) == 1


async def test_responses_finds_the_call_in_the_stored_chain(client, fake_engine):
    first = (await client.post("/v1/responses", json={
        "model": "fake-model", "input": [{"role": "user", "content": "Weather?"},
                                         FUNCTION_CALL]})).json()
    continued = await client.post("/v1/responses", json={
        "model": "fake-model", "previous_response_id": first["id"], "input": [_output("call_1")]})
    assert continued.status_code == 200, continued.text
    refused = await client.post("/v1/responses", json={
        "model": "fake-model", "previous_response_id": first["id"], "input": [_output("call_9")]})
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["message"] == (
        "No tool call found for function call output with call_id call_9.")


# -- Anthropic Messages -----------------------------------------------------------------


def _messages(*turns: dict[str, Any]) -> dict[str, Any]:
    return {"model": "fake-model", "max_tokens": 16,
            "messages": [{"role": "user", "content": "Weather?"}, *turns]}


def _use(tool_use_id: str) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "tool_use", "id": tool_use_id,
                                              "name": "get_weather", "input": {}}]}


def _result(tool_use_id: str) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id,
                                         "content": "Sunny"}]}


async def test_anthropic_refuses_a_result_the_previous_turn_did_not_call(client, fake_engine):
    answered = await client.post("/v1/messages", json=_messages(_use("toolu_1"),
                                                                _result("toolu_1")))
    assert answered.status_code == 200, answered.text
    for turns in ([_result("toolu_1")],  # no call at all
                  [_use("toolu_1"), _result("toolu_2")],  # another call's id
                  # a call of an earlier turn, not of the turn just before
                  [_use("toolu_1"), _result("toolu_1"),
                   {"role": "assistant", "content": "Sunny in Oslo."}, _result("toolu_1")]):
        refused = await client.post("/v1/messages", json=_messages(*turns))
        assert refused.status_code == 400, refused.text
        error = check_error(refused.json())
        assert error["type"] == "invalid_request_error"
        assert "unexpected `tool_use_id` found in `tool_result` blocks" in error["message"]
    assert len(fake_engine.requests) == 1


# -- Ollama -----------------------------------------------------------------------------


async def test_ollama_takes_any_tool_message(client, fake_engine):
    response = await client.post("/api/chat", json={
        "model": "fake-model", "stream": False,
        "messages": [{"role": "user", "content": "Weather?"},
                     {"role": "tool", "tool_name": "get_weather", "content": "Sunny"}]})
    assert response.status_code == 200, response.text
    assert fake_engine.requests[-1].prompts[0].messages[-1].role == "tool"
