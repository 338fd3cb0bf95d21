"""`tool_choice: "required"` and a named tool hold through an upstream: a replica that
answers with plain text, calls a tool it was not allowed, or writes arguments its
schema refuses fails the request by the dialect's contract (502 in its envelope, or
the stream's error event), and a replica that keeps the promise is relayed as is.

The replicas are Parlance apps over the scripted engine, which plays its script
whatever tool_choice says: the misbehaving llama-server of the report."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import AsyncIterator

import httpx
import pytest

from parlance.core.errors import InvalidRequest
from parlance.core.events import (
    Finish,
    FinishReason,
    TextDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    Usage,
)
from parlance.core.request import ChatInput, GenerationRequest
from parlance.core.tools import ToolChoice, ToolSpec
from parlance.engines.fake import FakeEngine, Generated
from parlance.engines.upstream.tool_contract import ToolContract
from tests.support.fake_app import make_app
from tests.support.sse import sse_data
from tests.support.upstream_replicas import AppServer, fleet, gateway

MODEL = "fake-model"
PATIENCE = 60.0
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time",
                                           "parameters": {"type": "object"}}}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
GOOD = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
BAD_ARGS = '<tool_call>\n{"name": "get_weather", "arguments": {"town": "Paris"}}\n</tool_call>'
OTHER = '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
PROSE = "Bien sûr, il fait beau à Paris."


# -- the check itself ---------------------------------------------------------------------


def contract(choice: ToolChoice) -> ToolContract:
    tools = (ToolSpec("get_weather", "", WEATHER), ToolSpec("get_time"))
    request = GenerationRequest(model="m", prompts=(ChatInput(()),), tools=tools,
                                tool_choice=choice)
    made = ToolContract.of(request)
    assert made is not None
    return made


def call(name: str, arguments: str) -> list:
    return [ToolCallStart("c1", name), ToolCallArgs(arguments), ToolCallEnd()]


def test_only_a_forced_choice_with_tools_has_a_contract():
    tools = (ToolSpec("get_time"),)
    for choice, tools_, has in ((ToolChoice("auto"), tools, False),
                                (ToolChoice("none"), tools, False),
                                (ToolChoice("required"), (), False),
                                (ToolChoice("required"), tools, True),
                                (ToolChoice("named", "get_time"), tools, True)):
        request = GenerationRequest(model="m", prompts=(ChatInput(()),), tools=tools_,
                                    tool_choice=choice)
        assert (ToolContract.of(request) is not None) is has


def test_a_valid_call_keeps_the_contract():
    check = contract(ToolChoice("required"))
    assert check.breach(call("get_weather", '{"city": "Paris"}')) is None
    assert check.breach([Finish(FinishReason.TOOL_CALLS)]) is None


def test_each_breach_is_named_without_quoting_the_values():
    cases = [
        (ToolChoice("required"), [TextDelta("Sure!"), Finish(FinishReason.STOP)], "without"),
        (ToolChoice("required"), call("get_weather", '{"town": "Paris"}'),
         "additionalProperties at /"),
        (ToolChoice("required"), call("get_weather", "{}"), "required at /"),
        (ToolChoice("required"), call("get_weather", '{"city": 7}'), "type at /city"),
        (ToolChoice("required"), call("get_weather", '{"city": '), "not JSON"),
        (ToolChoice("required"), call("get_weather", '["Paris"]'), "not a JSON object"),
        (ToolChoice("named", "get_weather"), call("get_time", "{}"), "does not allow"),
        (ToolChoice("required"), call("launch", "{}"), "does not allow"),
    ]
    for choice, events, said in cases:
        problem = contract(choice).breach(events)
        assert problem is not None and said in problem, (events, problem)
        assert "Paris" not in problem and "7" not in problem


def test_a_call_cut_by_max_tokens_is_no_breach_but_prose_cut_is():
    assert contract(ToolChoice("required")).breach(
        [ToolCallStart("c1", "get_weather"), ToolCallArgs('{"ci'),
         Finish(FinishReason.LENGTH)]) is None
    problem = contract(ToolChoice("required")).breach(
        [TextDelta("Bien sûr, il fait"), Finish(FinishReason.LENGTH)])
    assert problem is not None and "without" in problem


# -- through the gateway, in each dialect --------------------------------------------------


@pytest.fixture
async def replica() -> AsyncIterator[tuple[httpx.AsyncClient, FakeEngine]]:
    engine = FakeEngine()
    with AppServer(make_app(engine)) as server:
        upstream_fleet = fleet(server.base_url)
        app, served = gateway(upstream_fleet)
        await served.start()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://gateway", timeout=PATIENCE) as client:
            yield client, engine
        await served.aclose()


def script(engine: FakeEngine, text: str) -> None:
    engine.enqueue(Generated(text), Finish(FinishReason.STOP), Usage(5, 9))


def chat(choice, **fields) -> dict:
    return {"model": MODEL, "messages": ASK, "tools": TOOLS, "tool_choice": choice, **fields}


@pytest.mark.parametrize("answer", [PROSE, BAD_ARGS])
async def test_chat_refuses_a_broken_promise_at_once_and_mid_stream(replica, answer):
    client, engine = replica
    script(engine, answer)
    response = await client.post("/v1/chat/completions", json=chat("required"))
    assert response.status_code == 502, response.text
    assert response.json()["error"]["code"] == "tool_choice_unmet"
    script(engine, answer)
    streamed = await client.post("/v1/chat/completions", json=chat("required", stream=True))
    frames = sse_data(streamed.text)
    assert frames[-1] == "[DONE]"
    assert frames[-2]["error"]["code"] == "tool_choice_unmet"
    assert not any(f["choices"][0].get("finish_reason") for f in frames[:-2]
                   if isinstance(f, dict) and f.get("choices"))


async def test_a_named_tool_is_asked_for_alone_and_another_call_is_refused(replica):
    client, engine = replica
    script(engine, OTHER)
    named = {"type": "function", "function": {"name": "get_weather"}}
    response = await client.post("/v1/chat/completions", json=chat(named))
    assert response.status_code == 502
    asked, again = engine.requests[-2:]
    assert [t.name for t in asked.tools] == ["get_weather"]
    assert asked.tool_choice.mode == "required"
    assert not again.tools and again.response_format is not None  # the structured retry


STRUCTURED_CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


async def test_a_call_left_unmade_is_asked_again_as_structured_output(replica):
    """The replica ignores tool_choice (prose) but holds a JSON Schema: the call comes
    back from the schema, and the prose never reaches the client."""
    client, engine = replica
    script(engine, PROSE)
    script(engine, STRUCTURED_CALL)
    response = await client.post("/v1/chat/completions", json=chat("required"))
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    (call_,) = choice["message"]["tool_calls"]
    assert call_["function"]["name"] == "get_weather"
    assert json.loads(call_["function"]["arguments"]) == {"city": "Paris"}
    assert choice["finish_reason"] == "tool_calls"
    assert not choice["message"].get("content")
    again = engine.requests[-1]
    assert not again.tools
    assert again.response_format.kind == "json_schema" and again.response_format.strict
    branches = again.response_format.schema["anyOf"]
    assert [b["properties"]["name"]["const"] for b in branches] == ["get_weather", "get_time"]
    assert branches[0]["properties"]["arguments"] == WEATHER
    system = again.prompts[0].messages[0]
    assert system.role == "system" and "get_weather" in system.content


async def test_a_structured_call_streams_in_every_dialect(replica):
    client, engine = replica
    script(engine, PROSE)
    script(engine, STRUCTURED_CALL)
    streamed = await client.post("/v1/chat/completions", json=chat("required", stream=True))
    frames = [f for f in sse_data(streamed.text) if isinstance(f, dict)]
    deltas = [f["choices"][0]["delta"] for f in frames if f.get("choices")]
    assert not any(d.get("content") for d in deltas)
    assert [c["function"]["name"] for d in deltas for c in d.get("tool_calls") or ()
            if c["function"].get("name")] == ["get_weather"]
    assert frames[-1]["choices"][0]["finish_reason"] == "tool_calls" or any(
        f["choices"][0].get("finish_reason") == "tool_calls" for f in frames if f.get("choices"))
    script(engine, PROSE)
    script(engine, STRUCTURED_CALL)
    message = await client.post("/v1/messages", json={
        "model": MODEL, "max_tokens": 50, "messages": ASK,
        "tools": [{"name": "get_weather", "input_schema": WEATHER}],
        "tool_choice": {"type": "tool", "name": "get_weather"}})
    assert message.status_code == 200, message.text
    (use,) = [b for b in message.json()["content"] if b["type"] == "tool_use"]
    assert use["input"] == {"city": "Paris"}
    assert engine.requests[-1].response_format.schema["properties"]["name"]["const"] \
        == "get_weather"  # a named tool: one branch
    script(engine, PROSE)
    script(engine, STRUCTURED_CALL)
    responses = await client.post("/v1/responses", json={
        "model": MODEL, "input": "Weather in Paris?", "tool_choice": "required",
        "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER}]})
    assert responses.status_code == 200, responses.text
    (item,) = [i for i in responses.json()["output"] if i["type"] == "function_call"]
    assert json.loads(item["arguments"]) == {"city": "Paris"}


async def test_a_structured_answer_that_breaks_the_schema_is_refused(replica):
    client, engine = replica
    script(engine, PROSE)
    script(engine, '{"name": "get_weather", "arguments": {"town": "Paris"}}')
    response = await client.post("/v1/chat/completions", json=chat("required"))
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "tool_choice_unmet"


async def test_a_kept_promise_is_relayed(replica):
    client, engine = replica
    script(engine, GOOD)
    body = (await client.post("/v1/chat/completions", json=chat("required"))).json()
    call_ = body["choices"][0]["message"]["tool_calls"][0]["function"]
    assert (call_["name"], json.loads(call_["arguments"])) == ("get_weather", {"city": "Paris"})


async def test_anthropic_and_responses_end_their_streams_by_contract(replica):
    client, engine = replica
    anthropic_tools = [{"name": "get_weather", "input_schema": WEATHER}]
    script(engine, PROSE)
    message = await client.post("/v1/messages", json={
        "model": MODEL, "max_tokens": 50, "messages": ASK, "tools": anthropic_tools,
        "tool_choice": {"type": "any"}})
    assert message.status_code == 502
    assert message.json()["type"] == "error"
    script(engine, PROSE)
    streamed = await client.post("/v1/messages", json={
        "model": MODEL, "max_tokens": 50, "messages": ASK, "tools": anthropic_tools,
        "tool_choice": {"type": "tool", "name": "get_weather"}, "stream": True})
    events = [e for e in sse_data(streamed.text) if isinstance(e, dict)]
    assert events[-1]["type"] == "error"
    assert not any(e["type"] == "message_stop" for e in events)
    script(engine, PROSE)
    responses = await client.post("/v1/responses", json={
        "model": MODEL, "input": "Weather in Paris?", "tool_choice": "required",
        "tools": [{"type": "function", "name": "get_weather", "parameters": WEATHER}],
        "stream": True})
    kinds = [e["type"] for e in sse_data(responses.text) if isinstance(e, dict)]
    assert kinds[-1] == "response.failed" and "response.completed" not in kinds


# -- hostile patterns (issue 39) -------------------------------------------------------------

NESTED = {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}}}
# A bound that only turns a hang into a failure: a backtracking matcher takes 2^34 steps
# on this value (hours), a linear one microseconds.
HANG = 120.0


def test_a_catastrophic_pattern_is_checked_in_linear_time(monkeypatch):
    """Python's `re` backtracks (and holds the GIL while it does): the check must not use
    it at all, and must answer on the probe's value."""
    def backtracking(*args: object, **kwargs: object) -> None:
        raise AssertionError("a pattern was matched with Python's backtracking `re`")

    check = ToolContract((ToolSpec("f", "", NESTED),))
    verdict: list[str | None] = []
    with monkeypatch.context() as patched:
        for name in ("compile", "search", "match", "fullmatch"):
            patched.setattr(re, name, backtracking)
        worker = threading.Thread(target=lambda: verdict.append(
            check.breach(call("f", json.dumps({"x": "a" * 34 + "!"})))), daemon=True)
        worker.start()
        worker.join(HANG)
    assert not worker.is_alive(), "the pattern backtracked"
    assert verdict[0] is not None and "pattern at /x" in verdict[0]
    assert ToolContract((ToolSpec("f", "", NESTED),)).breach(
        call("f", json.dumps({"x": "a" * 34}))) is None


def test_a_pattern_no_linear_matcher_runs_is_refused_before_going_upstream():
    lookahead = {"type": "object", "properties": {"x": {"type": "string",
                                                        "pattern": "^(?=a)a$"}}}
    request = GenerationRequest(model="m", prompts=(ChatInput(()),),
                                tools=(ToolSpec("f", "", lookahead, param="tools[0]"),),
                                tool_choice=ToolChoice("required"))
    with pytest.raises(InvalidRequest) as refused:
        ToolContract.of(request)
    assert refused.value.param == "tools[0]" and refused.value.code == "invalid_schema"


async def test_the_gateway_answers_health_while_a_hostile_pattern_is_checked(replica):
    client, engine = replica
    tools = [{"type": "function", "function": {"name": "f", "parameters": NESTED}}]
    args = json.dumps({"x": "a" * 34 + "!"})
    script(engine, f'<tool_call>\n{{"name": "f", "arguments": {args}}}\n</tool_call>')
    answer = await client.post("/v1/chat/completions", json={
        "model": MODEL, "messages": ASK, "tools": tools, "tool_choice": "required"})
    assert answer.status_code == 502 and answer.json()["error"]["code"] == "tool_choice_unmet"
    assert (await client.get("/health")).status_code == 200


async def test_text_before_a_forced_call_is_held_then_relayed_with_it(replica):
    """Under a contract, text waits for the call (so a broken promise has sent nothing)
    and then goes out first, in order, with nothing lost."""
    client, engine = replica
    script(engine, "Let me check the forecast.\n" + GOOD)
    streamed = await client.post("/v1/chat/completions", json=chat("required", stream=True))
    deltas = [f["choices"][0]["delta"] for f in sse_data(streamed.text)
              if isinstance(f, dict) and f.get("choices")]
    content = "".join(d.get("content") or "" for d in deltas)
    assert content.strip() == "Let me check the forecast."
    first_call = next(i for i, d in enumerate(deltas) if d.get("tool_calls"))
    assert all(not d.get("content") for d in deltas[first_call:])
    assert len(engine.requests) == 1  # kept at once: no structured retry
