"""Every Responses tool type Codex sends, over the fake engine, with the official openai
SDK's types (strictly validated) as the oracle for every event and response:
namespaces, custom (freeform) tools and their grammars, client-executed tool search
with deferred tools, hosted tools echoed, local shell and shell calls; and the
warm-up request, sealed reasoning for `store: false`, context overflow."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx
import pytest
from openai._models import validate_type
from openai.types.responses import Response, ResponseStreamEvent

from parlance.core.errors import ContextOverflow
from parlance.core.events import Failed, Finish, FinishReason, TextDelta, Usage
from parlance.engines.fake import FakeEngine, Generated
from tests.support.fake_app import make_app
from tests.support.grammars import APPLY_PATCH_LARK
from tests.support.openai_sdk import sdk
from tests.support.openresponses import check_response, checked_events

RESPONSES = "/v1/responses"
HELLO = {"model": "fake-model", "input": "Hello!"}
FUNCTION = {"type": "function", "name": "exec_command", "strict": False, "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}
NAMESPACE = {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
             "tools": [{"type": "function", "name": "spawn_agent", "parameters": {
                 "type": "object", "properties": {"task": {"type": "string"}}}},
                       {"type": "function", "name": "wait_agent"}]}
APPLY_PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files.",
               "format": {"type": "grammar", "syntax": "lark",
                          "definition": APPLY_PATCH_LARK}}
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+Hello, world!\n*** End Patch\n"
HOSTED = [{"type": "web_search", "external_web_access": False,
           "search_content_types": ["text", "image"]},
          {"type": "file_search", "vector_store_ids": ["vs_1"]},
          {"type": "code_interpreter", "container": {"type": "auto"}},
          {"type": "image_generation"},
          {"type": "computer_use_preview", "display_width": 1024, "display_height": 768,
           "environment": "linux"},
          {"type": "web_search_preview"}]


def checked(body: dict[str, Any]) -> Response:
    return validate_type(type_=Response, value=body)


def events(text: str) -> list[dict[str, Any]]:
    """The SSE events of a Responses stream, each validated as the SDK's event type.
    (The SDK lists only some of the codes `response.failed` carries: OpenAI also sends
    `context_length_exceeded`, which Codex acts on; the rest is validated.)"""
    out = []
    for block in text.strip().split("\n\n"):
        data = next(line[6:] for line in block.splitlines() if line.startswith("data: "))
        if data != "[DONE]":
            event = json.loads(data)
            shape = event
            if event["type"] == "response.failed":
                error = {**event["response"]["error"], "code": "server_error"}
                shape = {**event, "response": {**event["response"], "error": error}}
            validate_type(type_=ResponseStreamEvent, value=shape)
            out.append(event)
    return out


def of_type(frames: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == kind]


async def post(client, **body: Any) -> Any:
    response = await client.post(RESPONSES, json={**HELLO, **body})
    assert response.status_code == 200, response.text
    return response


# -- namespaces --------------------------------------------------------------------


async def test_namespaced_functions_are_offered_and_called_by_their_namespace(
        client, fake_engine):
    fake_engine.enqueue(Generated('<tool_call>{"name": "multi_agent_v1.spawn_agent", '
                                  '"arguments": {"task": "lint"}}</tool_call>'),
                        Finish(FinishReason.STOP), Usage(5, 9))
    frames = events((await post(client, tools=[FUNCTION, NAMESPACE], stream=True)).text)
    offered = [t.name for t in fake_engine.requests[-1].tools]
    assert offered == ["exec_command", "multi_agent_v1.spawn_agent", "multi_agent_v1.wait_agent"]
    [done] = of_type(frames, "response.output_item.done")
    call = done["item"]
    assert (call["type"], call["name"], call["namespace"]) == (
        "function_call", "spawn_agent", "multi_agent_v1")
    assert json.loads(call["arguments"]) == {"task": "lint"}
    final = checked(frames[-1]["response"])
    assert final.tools[1].type == "namespace" and final.output[0].namespace == "multi_agent_v1"
    # the call and its output come back in the next request's input
    await post(client, tools=[FUNCTION, NAMESPACE], input=[
        {"type": "message", "role": "user", "content": "Lint it."}, call,
        {"type": "function_call_output", "call_id": call["call_id"], "output": "agent 7"}])
    messages = fake_engine.requests[-1].prompts[0].messages
    assert messages[1].tool_calls[0].name == "multi_agent_v1.spawn_agent"
    assert (messages[2].role, messages[2].content) == ("tool", "agent 7")


async def test_tool_choice_names_a_namespaced_function_by_its_own_name(client, fake_engine):
    await post(client, tools=[NAMESPACE], tool_choice={"type": "function", "name": "wait_agent"})
    assert fake_engine.requests[-1].tool_choice.name == "multi_agent_v1.wait_agent"


# -- custom (freeform) tools ---------------------------------------------------------


async def test_custom_tool_call_streams_its_input(client, fake_engine):
    fake_engine.enqueue(Generated('Patching. <tool_call>\n{"name": "apply_patch"}\n'),
                        Generated(PATCH[:20]), Generated(PATCH[20:] + "\n</tool_call>"),
                        Finish(FinishReason.STOP), Usage(5, 30))
    frames = events((await post(client, tools=[FUNCTION, APPLY_PATCH], stream=True)).text)
    [tool] = [t for t in fake_engine.requests[-1].tools if t.name == "apply_patch"]
    assert tool.freeform and tool.grammar.syntax == "lark"
    assert tool.grammar.definition == APPLY_PATCH_LARK
    added = of_type(frames, "response.output_item.added")[1]["item"]
    assert added["type"] == "custom_tool_call" and added["input"] == ""
    assert added["id"].startswith("ctc_") and added["call_id"].startswith("call_")
    deltas = of_type(frames, "response.custom_tool_call_input.delta")
    assert "".join(d["delta"] for d in deltas) == PATCH and len(deltas) >= 2
    assert all(d["item_id"] == added["id"] and d["output_index"] == 1 for d in deltas)
    [done_input] = of_type(frames, "response.custom_tool_call_input.done")
    assert done_input["input"] == PATCH
    call = of_type(frames, "response.output_item.done")[1]["item"]
    assert call == {**added, "input": PATCH, "status": "completed"}
    final = checked(frames[-1]["response"])
    assert final.output[1].type == "custom_tool_call" and final.output[1].input == PATCH
    assert final.tools[1].format.definition == APPLY_PATCH_LARK


async def test_custom_tool_call_non_stream_and_its_output_round_trip(client, fake_engine):
    fake_engine.enqueue(Generated('<tool_call>\n{"name": "apply_patch"}\n' + PATCH
                                  + "\n</tool_call>"), Finish(FinishReason.STOP), Usage(5, 30))
    body = (await post(client, tools=[APPLY_PATCH],
                       tool_choice={"type": "custom", "name": "apply_patch"})).json()
    assert fake_engine.requests[-1].tool_choice.name == "apply_patch"
    response = checked(body)
    assert response.tool_choice.type == "custom" and response.tool_choice.name == "apply_patch"
    [call] = body["output"]
    assert call["type"] == "custom_tool_call" and call["input"] == PATCH
    await post(client, tools=[APPLY_PATCH], input=[
        {"type": "message", "role": "user", "content": "Add hello.txt"}, call,
        {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "Done!"}])
    user, assistant, tool = fake_engine.requests[-1].prompts[0].messages
    [made] = assistant.tool_calls
    assert (made.name, made.arguments, made.freeform) == ("apply_patch", PATCH, True)
    assert (tool.role, tool.tool_call_id, tool.content) == ("tool", call["call_id"], "Done!")


async def test_a_grammar_that_cannot_be_enforced_is_a_400(client):
    bad = {**APPLY_PATCH, "format": {"type": "grammar", "syntax": "lark",
                                     "definition": "start: undefined_rule"}}
    for stream in (False, True):
        response = await client.post(RESPONSES, json={**HELLO, "tools": [FUNCTION, bad],
                                                      "stream": stream})
        assert response.status_code == 400
        assert response.json()["error"]["param"] == "tools[1].format.definition"
        assert response.json()["error"]["code"] == "invalid_grammar"


async def test_custom_tools_with_text_or_regex_formats(client, fake_engine):
    tools = [{"type": "custom", "name": "note"},
             {"type": "custom", "name": "phone", "format": {"type": "text"}},
             {"type": "custom", "name": "zip", "format": {
                 "type": "grammar", "syntax": "regex", "definition": "[0-9]{5}"}}]
    await post(client, tools=tools)
    offered = fake_engine.requests[-1].tools
    assert [(t.freeform, t.grammar) for t in offered[:2]] == [(True, None), (True, None)]
    assert (offered[2].grammar.syntax, offered[2].grammar.definition) == ("regex", "[0-9]{5}")


# -- tool search and deferred tools ---------------------------------------------------

SEARCH = {"type": "tool_search", "execution": "client", "description": "Find tools.",
          "parameters": {"type": "object", "properties": {
              "query": {"type": "string"}, "limit": {"type": "integer"}}}}
DEFERRED = {**FUNCTION, "name": "get_weather", "defer_loading": True}


async def test_client_tool_search_loads_deferred_tools(client, fake_engine):
    fake_engine.enqueue(Generated('<tool_call>{"name": "tool_search", "arguments": '
                                  '{"query": "weather", "limit": 2}}</tool_call>'),
                        Finish(FinishReason.STOP), Usage(5, 9))
    frames = events((await post(client, tools=[FUNCTION, DEFERRED, SEARCH], stream=True)).text)
    offered = {t.name: t for t in fake_engine.requests[-1].tools}
    assert set(offered) == {"exec_command", "tool_search"}  # get_weather waits
    assert "get_weather" in offered["tool_search"].description
    [done] = of_type(frames, "response.output_item.done")
    search = done["item"]
    assert search["type"] == "tool_search_call" and search["execution"] == "client"
    assert search["arguments"] == {"query": "weather", "limit": 2}
    assert [f["item"]["type"] for f in of_type(frames, "response.output_item.added")] == [
        "tool_search_call"]
    checked(frames[-1]["response"])
    loaded = {"type": "tool_search_output", "call_id": search["call_id"], "execution": "client",
              "status": "completed", "tools": [{**DEFERRED, "defer_loading": False}]}
    await post(client, tools=[FUNCTION, DEFERRED, SEARCH], input=[
        {"type": "message", "role": "user", "content": "Weather?"}, search, loaded])
    request = fake_engine.requests[-1]
    assert {t.name for t in request.tools} == {"exec_command", "tool_search", "get_weather"}
    _, assistant, tool = request.prompts[0].messages
    assert assistant.tool_calls[0].name == "tool_search"
    assert json.loads(assistant.tool_calls[0].arguments) == {"query": "weather", "limit": 2}
    assert tool.tool_call_id == search["call_id"] and "get_weather" in tool.content


async def test_deferred_tools_are_offered_when_nothing_can_search_for_them(client,
                                                                           fake_engine):
    await post(client, tools=[DEFERRED, {"type": "tool_search"}])  # hosted search: not here
    assert [t.name for t in fake_engine.requests[-1].tools] == ["get_weather"]


# -- hosted tools, local shell and shell ----------------------------------------------


async def test_hosted_tools_are_echoed_and_never_offered(client, fake_engine):
    body = (await post(client, tools=[*HOSTED, FUNCTION])).json()
    assert [t.name for t in fake_engine.requests[-1].tools] == ["exec_command"]
    assert body["tools"][:len(HOSTED)] == HOSTED
    response = checked(body)
    assert response.tools[0].type == "web_search"
    only_hosted = await client.post(RESPONSES, json={**HELLO, "tools": HOSTED,
                                                     "tool_choice": "auto"})
    assert only_hosted.status_code == 200 and fake_engine.requests[-1].tools == ()
    forced = await client.post(RESPONSES, json={**HELLO, "tools": HOSTED,
                                                "tool_choice": {"type": "web_search_preview"}})
    assert forced.status_code == 400 and forced.json()["error"]["param"] == "tool_choice.type"


@pytest.mark.parametrize(("tool", "arguments", "kind", "action"), [
    ({"type": "local_shell"}, {"command": ["ls", "-la"], "working_directory": "/tmp"},
     "local_shell_call", {"type": "exec", "command": ["ls", "-la"], "env": {},
                          "timeout_ms": None, "user": None, "working_directory": "/tmp"}),
    ({"type": "shell"}, {"commands": ["pwd", "ls"], "timeout_ms": 5000}, "shell_call",
     {"commands": ["pwd", "ls"], "timeout_ms": 5000, "max_output_length": None}),
])
async def test_shell_calls_are_their_own_items(client, fake_engine, tool, arguments, kind,
                                               action):
    name = tool["type"]
    call = json.dumps({"name": name, "arguments": arguments})
    fake_engine.enqueue(Generated(f"<tool_call>{call}</tool_call>"), Finish(FinishReason.STOP),
                        Usage(5, 9))
    frames = events((await post(client, tools=[tool], stream=True)).text)
    assert [t.name for t in fake_engine.requests[-1].tools] == [name]
    [done] = of_type(frames, "response.output_item.done")
    item = done["item"]
    assert (item["type"], item["action"], item["status"]) == (kind, action, "completed")
    checked(frames[-1]["response"])
    output = ({"type": "local_shell_call_output", "id": item["call_id"], "output": "a\nb"}
              if kind == "local_shell_call" else
              {"type": "shell_call_output", "call_id": item["call_id"], "output": [
                  {"stdout": "a\nb", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]})
    await post(client, tools=[tool], input=[
        {"type": "message", "role": "user", "content": "List."}, item, output])
    _, assistant, answer = fake_engine.requests[-1].prompts[0].messages
    assert assistant.tool_calls[0].name == name
    assert {k: v for k, v in json.loads(assistant.tool_calls[0].arguments).items()} == arguments
    assert answer.tool_call_id == item["call_id"] and answer.content.startswith("a\nb")


async def test_shell_arguments_that_fit_no_action_stay_a_function_call(client, fake_engine):
    fake_engine.enqueue(Generated('<tool_call>{"name": "local_shell", "arguments": '
                                  '{"command": "ls -la"}}</tool_call>'),
                        Finish(FinishReason.STOP), Usage(5, 9))
    [item] = (await post(client, tools=[{"type": "local_shell"}])).json()["output"]
    assert (item["type"], item["name"], item["arguments"]) == (
        "function_call", "local_shell", '{"command": "ls -la"}')


# -- Codex's warm-up, sealed reasoning, overflow -----------------------------------------


async def test_warm_up_with_empty_input_and_one_token(client, fake_engine):
    response = await client.post(RESPONSES, json={"input": "", "max_output_tokens": 1})
    assert response.status_code == 200, response.text
    body = checked(response.json())
    assert body.max_output_tokens == 1 and fake_engine.requests[-1].max_tokens == 1
    assert body.status == "incomplete" and body.output[0].content[0].text == "Hello"


SEALED = {**HELLO, "store": False, "include": ["reasoning.encrypted_content"]}


async def test_reasoning_is_sealed_for_store_false_and_read_back(client, fake_engine):
    fake_engine.enqueue(Generated("<think>The user greets me.</think>Hi!"),
                        Finish(FinishReason.STOP), Usage(5, 9, reasoning_tokens=5))
    text = (await post(client, **SEALED, stream=True)).text
    checked_events(text)  # every event per the Open Responses specification as well
    frames = events(text)
    reasoning = of_type(frames, "response.output_item.done")[0]["item"]
    assert reasoning["type"] == "reasoning" and reasoning["encrypted_content"]
    assert "encrypted_content" not in of_type(frames, "response.output_item.added")[0]["item"]
    message = of_type(frames, "response.output_item.done")[1]["item"]
    # the client keeps the conversation: it sends the items back, the reasoning only sealed
    sealed_only = {k: v for k, v in reasoning.items() if k != "content"}
    await post(client, **{**SEALED, "input": [
        {"type": "message", "role": "user", "content": "Hello!"}, sealed_only, message,
        {"type": "message", "role": "user", "content": "How are you?"}]})
    _, assistant, _ = fake_engine.requests[-1].prompts[0].messages
    assert (assistant.content, assistant.reasoning) == ("Hi!", "The user greets me.")


async def test_reasoning_is_sealed_in_the_non_stream_body_too(client, fake_engine):
    fake_engine.enqueue(Generated("<think>Hmm.</think>Hi!"), Finish(FinishReason.STOP),
                        Usage(5, 9))
    body = (await post(client, **SEALED)).json()
    assert checked(body).output[0].encrypted_content
    check_response(body)  # the Open Responses specification has the field too
    fake_engine.enqueue(Generated("<think>Hmm.</think>Hi!"), Finish(FinishReason.STOP),
                        Usage(5, 9))
    unsealed = (await post(client, **{**SEALED, "include": []})).json()
    assert "encrypted_content" not in unsealed["output"][0]


async def test_altered_sealed_reasoning_is_a_400(client, fake_engine):
    fake_engine.enqueue(Generated("<think>Secret plan.</think>Hi!"), Finish(FinishReason.STOP),
                        Usage(5, 9))
    reasoning = (await post(client, **SEALED)).json()["output"][0]
    token = reasoning["encrypted_content"]
    altered = token[:-6] + ("AAAAAA" if token[-6:] != "AAAAAA" else "BBBBBB")
    for content in (altered, "not-ours", 42):
        response = await client.post(RESPONSES, json={**SEALED, "input": [
            {**reasoning, "encrypted_content": content},
            {"type": "message", "role": "user", "content": "Go on."}]})
        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["param"], error["code"]) == ("input[0].encrypted_content",
                                                   "invalid_encrypted_content")


async def test_overflow_in_a_stream_that_began_is_response_failed(client, fake_engine):
    fake_engine.enqueue(TextDelta("Hi"), Failed(ContextOverflow(
        "The conversation no longer fits.", param="messages", code="context_length_exceeded")))
    frames = events((await post(client, stream=True)).text)
    assert frames[-1]["type"] == "response.failed"
    assert frames[-1]["response"]["error"]["code"] == "context_length_exceeded"


async def test_overflow_before_the_stream_is_a_400_naming_input():
    app = make_app(FakeEngine(context_length=4))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                 base_url="http://t") as client:
        for stream in (False, True):
            response = await client.post(RESPONSES, json={
                **HELLO, "input": "one two three four five six", "stream": stream})
            assert response.status_code == 400
            error = response.json()["error"]
            assert (error["type"], error["param"], error["code"]) == (
                "invalid_request_error", "input", "context_length_exceeded")
        chat = await client.post("/v1/chat/completions", json={
            "model": "fake-model", "messages": [{"role": "user", "content": "a b c d e f"}]})
        assert chat.status_code == 403  # a context overflow in Chat Completions


# -- a request modelled on Codex's first one ---------------------------------------------

CODEX_HEADERS = {"x-codex-beta-features": "remote_compaction_v2",
                 "x-codex-window-id": "w-1",
                 "x-codex-turn-metadata": json.dumps({"turn": 1}),
                 "session_id": "0199a2b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b"}


def codex_body() -> dict[str, Any]:
    """What Codex 0.169 sends first (agent-clients.md), tools and all."""
    def function(name: str, **properties: Any) -> dict[str, Any]:
        return {"type": "function", "name": name, "description": f"The {name} tool.",
                "strict": False, "parameters": {
                    "type": "object", "properties": properties,
                    "required": list(properties), "additionalProperties": False}}

    text = {"type": "string"}
    return {
        "model": "fake-model", "stream": True, "store": False,
        "include": ["reasoning.encrypted_content"], "reasoning": {"summary": "auto"},
        "tool_choice": "auto", "parallel_tool_calls": True,
        "prompt_cache_key": "0199a2b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b",
        "client_metadata": {"originator": "codex_exec"}, "text": {"verbosity": "medium"},
        "instructions": "You are Codex, a coding agent.",
        "input": [
            {"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": "<permissions instructions>…"}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "<environment_context>…"}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "Say hello."}]}],
        "tools": [
            function("exec_command", cmd=text, workdir=text),
            function("write_stdin", session_id={"type": "integer"}, chars=text),
            function("request_user_input", question=text),
            function("view_image", path=text),
            {"type": "namespace", "name": "multi_agent_v1", "description": "Sub-agents.",
             "tools": [function(n, id=text) for n in (
                 "close_agent", "resume_agent", "send_input", "spawn_agent", "wait_agent")]},
            {"type": "web_search", "external_web_access": False,
             "search_content_types": ["text", "image"]},
            APPLY_PATCH,
            {"type": "tool_search", "execution": "client", "description": "Search tools.",
             "parameters": {"type": "object", "properties": {
                 "query": text, "limit": {"type": "integer"}}, "required": ["query"]}},
        ],
    }


async def test_codex_first_request_streams_to_completion(client, fake_engine):
    fake_engine.enqueue(Generated("<think>A greeting.</think>Hello!"),
                        Finish(FinishReason.STOP), Usage(6500, 5, reasoning_tokens=3))
    response = await client.post(RESPONSES, json=codex_body(), headers=CODEX_HEADERS)
    assert response.status_code == 200, response.text
    frames = events(response.text)
    assert frames[-1]["type"] == "response.completed"
    final = checked(frames[-1]["response"])
    assert final.prompt_cache_key == "0199a2b4-5c6d-7e8f-9a0b-1c2d3e4f5a6b"
    assert final.output[0].encrypted_content and final.output_text == "Hello!"
    offered = [t.name for t in fake_engine.requests[-1].tools]
    assert "multi_agent_v1.spawn_agent" in offered and "apply_patch" in offered
    assert "tool_search" in offered and "web_search" not in offered
    roles = [m.role for m in fake_engine.requests[-1].prompts[0].messages]
    assert roles == ["system", "developer", "user", "user"]


async def test_codex_first_request_through_the_sdk():
    engine = FakeEngine()
    engine.enqueue(Generated("Hello!"), Finish(FinishReason.STOP), Usage(9, 2))
    body = codex_body()
    extra = {"client_metadata": body.pop("client_metadata"), "tools": body.pop("tools")}
    stream = await sdk(engine).responses.create(**body, extra_body=extra,
                                                extra_headers=CODEX_HEADERS)
    kinds = [event.type async for event in stream]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"


async def test_stored_calls_of_every_kind_replay_as_their_stream(client, fake_engine):
    fake_engine.enqueue(
        Generated("<think>Two steps.</think>"),
        Generated('<tool_call>\n{"name": "apply_patch"}\n' + PATCH + "\n</tool_call>"),
        Generated('<tool_call>{"name": "local_shell", "arguments": {"command": ["ls"]}}'
                  '</tool_call>'),
        Generated('<tool_call>{"name": "multi_agent_v1.wait_agent", "arguments": {}}'
                  "</tool_call>"), Finish(FinishReason.STOP), Usage(5, 40))
    created = (await post(client, stream=True, include=["reasoning.encrypted_content"],
                          tools=[APPLY_PATCH, {"type": "local_shell"}, NAMESPACE])).text
    live = events(created)
    stored = live[-1]["response"]
    assert [i["type"] for i in stored["output"]] == [
        "reasoning", "custom_tool_call", "local_shell_call", "function_call"]
    replayed = events((await client.get(f"{RESPONSES}/{stored['id']}",
                                        params={"stream": "true"})).text)
    def kinds(frames: list[dict[str, Any]]) -> list[str]:  # a replay has one delta each
        return [kind for kind, _ in itertools.groupby(e["type"] for e in frames)]

    assert kinds(replayed) == kinds(live)
    assert [e["item"] for e in of_type(replayed, "response.output_item.done")] == stored["output"]
    assert replayed[-1]["response"] == stored
