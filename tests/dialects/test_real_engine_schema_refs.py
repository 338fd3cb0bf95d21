"""Schemas with `$defs` / `$ref` on the REAL engine (SmolLM2-135M, greedy), one forced
call or structured answer per dialect family: its arguments validate against the
client's schema (`jsonschema`), recursive ones included. A `"$ref": "#"` is the tool's
own schema, never the call object around it; mistral-vibe's `todo` tool (pydantic
`$defs`) compiles instead of being refused; an MCP tool's pydantic input schema too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel

from parlance.integrations.settings import IntegrationSettings
from tests.support import mcp_server
from tests.support.real_engine import MODEL_ID, asgi_client, make_app

pytestmark = pytest.mark.model

# A tree whose children are trees.
TREE = {"type": "object",
        "properties": {"name": {"type": "string", "maxLength": 30},
                       "children": {"type": "array", "items": {"$ref": "#"}, "maxItems": 3}},
        "required": ["name", "children"]}

# mistral-vibe's `todo` tool: its pydantic arguments, `$defs` and refs with siblings.
TODO = {
    "$defs": {
        "TodoItem": {"properties": {
            "id": {"title": "Id", "type": "string", "maxLength": 8},
            "content": {"title": "Content", "type": "string", "maxLength": 60},
            "status": {"$ref": "#/$defs/TodoStatus", "default": "pending"},
            "priority": {"$ref": "#/$defs/TodoPriority", "default": "medium"}},
            "required": ["id", "content"], "title": "TodoItem", "type": "object"},
        "TodoPriority": {"enum": ["low", "medium", "high"], "title": "TodoPriority",
                         "type": "string"},
        "TodoStatus": {"enum": ["pending", "in_progress", "completed", "cancelled"],
                       "title": "TodoStatus", "type": "string"}},
    "properties": {
        "action": {"description": "Either 'read' or 'write'", "enum": ["read", "write"],
                   "title": "Action", "type": "string"},
        "todos": {"anyOf": [{"items": {"$ref": "#/$defs/TodoItem"}, "maxItems": 3,
                             "type": "array"}, {"type": "null"}], "default": None}},
    "required": ["action"], "title": "TodoArgs", "type": "object"}


class Node(BaseModel):  # pydantic's recursive model: a root `$ref` beside `$defs`
    label: str
    children: list[Node]


NODE = Node.model_json_schema()
# Greedy SmolLM2 nests a recursive structure until max_tokens cuts it, unless the prompt
# shows it one to copy.
TREE_ASK = ('Call the tool with exactly this: {"name": "cooking", "children": '
            '[{"name": "baking", "children": []}]}')
NODE_ASK = ('Call the tool with exactly this: {"label": "cooking", "children": '
            '[{"label": "baking", "children": []}]}')
DOCUMENT_ASK = ('Call the tool with exactly this: {"document": {"title": "Cooking", '
                '"sections": [{"title": "Baking", "sections": []}]}}')
TODO_ASK = "Plan this task: create hello.txt containing hi."


def valid(value: Any, schema: dict[str, Any]) -> Any:
    jsonschema.validate(value, schema)
    return value


async def _post(llama, path: str, body: dict[str, Any], **settings: Any) -> dict[str, Any]:
    async with asgi_client(make_app(llama, **settings)) as http:
        response = await http.post(path, json={"model": MODEL_ID, **body})
    assert response.status_code == 200, response.text
    return response.json()


async def test_chat_forced_call_with_a_root_ref(llama):
    tool = {"type": "function", "function": {"name": "tree", "parameters": TREE,
                                             "description": "Record a tree of topics"}}
    reply = await _post(llama, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": TREE_ASK}], "tools": [tool],
        "tool_choice": {"type": "function", "function": {"name": "tree"}},
        "temperature": 0, "max_tokens": 400})
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    [call] = choice["message"]["tool_calls"]
    arguments = valid(json.loads(call["function"]["arguments"]), TREE)
    assert "arguments" not in json.dumps(arguments)  # never the call wrapper again


async def test_responses_forced_call_of_mistral_vibes_todo_tool(llama):
    tool = {"type": "function", "name": "todo", "parameters": TODO, "strict": False,
            "description": "Read or write the todo list"}
    reply = await _post(llama, "/v1/responses", {
        "input": TODO_ASK, "tools": [tool], "tool_choice": "required",
        "parallel_tool_calls": False, "temperature": 0, "max_output_tokens": 400})
    assert reply["status"] == "completed", reply
    [call] = [item for item in reply["output"] if item["type"] == "function_call"]
    assert call["name"] == "todo"
    valid(json.loads(call["arguments"]), TODO)


async def test_anthropic_forced_tool_use_of_a_recursive_pydantic_model(llama):
    reply = await _post(llama, "/v1/messages", {
        "messages": [{"role": "user", "content": NODE_ASK}], "max_tokens": 400,
        "temperature": 0, "tools": [{"name": "outline", "input_schema": NODE}],
        "tool_choice": {"type": "tool", "name": "outline"}})
    assert reply["stop_reason"] == "tool_use", reply
    [use] = [block for block in reply["content"] if block["type"] == "tool_use"]
    valid(use["input"], NODE)


async def test_ollama_format_with_a_root_ref(llama):
    reply = await _post(llama, "/api/chat", {
        "messages": [{"role": "user", "content": TREE_ASK.replace("Call the tool with",
                                                                  "Answer")}], "format": TREE,
        "stream": False, "options": {"temperature": 0, "num_predict": 400}})
    assert reply["done_reason"] == "stop", reply
    valid(json.loads(reply["message"]["content"]), TREE)


@pytest.fixture(scope="module")
def mcp() -> Iterator[mcp_server.RunningServer]:
    server = mcp_server.start()
    yield server
    server.stop()


async def test_forced_mcp_call_of_a_tool_with_defs(llama, mcp):
    mcp_server.RAN.clear()
    tool = {"type": "mcp", "server_label": "huggingface", "server_url": mcp.url,
            "allowed_tools": ["outline"], "require_approval": "never"}
    reply = await _post(llama, "/v1/responses", {
        "input": DOCUMENT_ASK, "tools": [tool], "parallel_tool_calls": False,
        "tool_choice": {"type": "mcp", "server_label": "huggingface", "name": "outline"},
        "temperature": 0, "max_output_tokens": 400},
        integrations=IntegrationSettings(allow_request_servers=True,
                                         allowed_hosts=("127.0.0.1",)))
    listing, call = reply["output"][:2]
    [schema] = [t["input_schema"] for t in listing["tools"] if t["name"] == "outline"]
    assert "$defs" in schema
    assert call["type"] == "mcp_call" and call["name"] == "outline", reply["output"]
    valid(json.loads(call["arguments"]), schema)
    assert mcp_server.RAN == ["outline"] and "Outlined 'Cooking'" in call["output"]
