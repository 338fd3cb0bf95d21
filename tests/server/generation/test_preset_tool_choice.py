"""A preset's `tool_choice` (issue 38): an operator makes a model that will not call
tools by itself act on each instruction. The choice is forced on a turn's first step
only (the conversation ends with the user's message and the client left `tool_choice`
auto), so after the results the model answers as it likes and an agent's loop ends."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from parlance.core.messages import Message
from parlance.core.request import ChatInput, GenerationRequest, with_preset_tool_choice
from parlance.core.tools import ToolChoice, ToolSpec
from parlance.engines.fake import FakeEngine
from parlance.models.served import ServedModel, ServedModels
from parlance.server import ServerSettings, create_app
from tests.support.fake_app import FAKE_SPEC

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}}
TOOLS = (ToolSpec("get_weather", "", WEATHER), ToolSpec("read", "", WEATHER))


AUTO = ToolChoice()


def request(*messages: Message, choice: ToolChoice = AUTO,
            tools: tuple[ToolSpec, ...] = TOOLS) -> GenerationRequest:
    return GenerationRequest(model="m", prompts=(ChatInput(messages),), tools=tools,
                             tool_choice=choice)


USER = Message("user", "Weather in Paris?")
AFTER_CALL = (USER, Message("assistant", ""), Message("tool", "sunny", tool_call_id="c1"))


@pytest.mark.parametrize(("preset", "want"), [
    ("required", ToolChoice("required")),
    ("read", ToolChoice("named", "read")),
    ("unknown_tool", ToolChoice()),  # a name the request does not offer forces nothing
])
def test_a_turns_first_step_is_forced(preset, want):
    assert with_preset_tool_choice(request(USER), preset).tool_choice == want


@pytest.mark.parametrize("req", [
    request(*AFTER_CALL),  # the results are back: the model answers freely
    request(USER, choice=ToolChoice("none")),  # the client's own choice wins
    request(USER, choice=ToolChoice("named", "get_weather")),
    request(USER, tools=()),  # nothing to call
], ids=["after-results", "client-none", "client-named", "no-tools"])
def test_the_rest_is_left_as_the_client_sent_it(req):
    assert with_preset_tool_choice(req, "required") == req


def test_no_preset_choice_changes_nothing():
    assert with_preset_tool_choice(request(USER), None) == request(USER)


async def test_the_engine_gets_the_forced_first_step_in_every_api():
    engine = FakeEngine()
    spec = dataclasses.replace(FAKE_SPEC, tool_choice="get_weather")
    app = create_app(ServedModels([ServedModel(spec, engine, 1700000000)]), ServerSettings())
    tool = {"name": "get_weather", "parameters": WEATHER}
    bodies = {
        "/v1/chat/completions": {"model": "fake-model", "tool_choice": "auto",
                                 "messages": [{"role": "user", "content": "Weather?"}],
                                 "tools": [{"type": "function", "function": tool}]},
        "/v1/responses": {"model": "fake-model", "input": "Weather?", "store": False,
                          "tools": [{"type": "function", **tool}]},
        "/v1/messages": {"model": "fake-model", "max_tokens": 20,
                         "messages": [{"role": "user", "content": "Weather?"}],
                         "tools": [{"name": "get_weather", "input_schema": WEATHER}]},
        "/api/chat": {"model": "fake-model", "stream": False,
                      "messages": [{"role": "user", "content": "Weather?"}],
                      "tools": [{"type": "function", "function": tool}]},
    }
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        for path, body in bodies.items():
            response = await client.post(path, json=body)
            assert response.status_code == 200, (path, response.text)
        after = await client.post("/v1/chat/completions", json={
            **bodies["/v1/chat/completions"], "messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "get_weather", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]})
        assert after.status_code == 200, after.text
    choices = [r.tool_choice for r in engine.requests]
    assert choices == [ToolChoice("named", "get_weather")] * 4 + [ToolChoice()]
