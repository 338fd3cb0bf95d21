"""Anthropic's MCP connector (`mcp_servers`): per-request MCP servers whose tools the
server runs itself, in the same tool loop and under the same operator rules as LM
Studio's `ephemeral_mcp` (`--allow-request-mcp`, the address guard). The response
starts with one `mcp_tool_listing` block per server and shows each call as an
`mcp_tool_use` block followed by its `mcp_tool_result`. A listing sent back is not used
in place of asking the server again (the call needs a session to that server anyway)."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field

from parlance.core.events import ToolRefused, ToolsListed
from parlance.core.tools import ToolServerRef
from parlance.dialects.anthropic.ids import mcp_tool_use_id
from parlance.dialects.shared.mcp_servers import server_ref
from parlance.dialects.shared.wire import WireModel


class ToolConfigurationIn(WireModel):
    enabled: bool | None = None
    allowed_tools: list[str] | None = None


class McpServerIn(WireModel):
    type: Literal["url"]
    url: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    authorization_token: str | None = None
    tool_configuration: ToolConfigurationIn | None = None


def tool_servers(servers: list[McpServerIn] | None) -> tuple[ToolServerRef, ...]:
    """The servers whose tools the model is offered; `enabled: false` hides one."""
    refs: list[ToolServerRef] = []
    for i, server in enumerate(servers or ()):
        config = server.tool_configuration or ToolConfigurationIn()
        if config.enabled is False:
            continue
        refs.append(server_ref(server.name, server.url, param=f"mcp_servers[{i}]",
                               label_param=f"mcp_servers[{i}].name", taken=refs,
                               allowed_tools=config.allowed_tools,
                               bearer=server.authorization_token))
    return tuple(refs)


def listing_block(listed: ToolsListed) -> dict[str, Any]:
    """The tools one server offered the model in this response (after the request's
    `allowed_tools` filter): Anthropic's `mcp_tool_listing` block, sent first."""
    return {"type": "mcp_tool_listing", "mcp_server_name": listed.provider.label,
            "tools": [{"name": t.name, "description": t.description,
                       "input_schema": t.parameters} for t in listed.tools]}


def use_block(call_id: str, name: str, server: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "mcp_tool_use", "id": mcp_tool_use_id(call_id), "name": name,
            "server_name": server, "input": arguments}


def result_block(call_id: str, outcome: str | ToolRefused,
                 failed: bool = False) -> dict[str, Any]:
    """The call's result: the tool's content blocks as text blocks, `is_error` when the
    tool reported failure (`failed`); or (`is_error`) why the call did not run."""
    if isinstance(outcome, ToolRefused):
        texts, is_error = [outcome.reason], True
    else:
        texts, is_error = _texts(outcome), failed
    return {"type": "mcp_tool_result", "tool_use_id": mcp_tool_use_id(call_id),
            "is_error": is_error,
            "content": [{"type": "text", "text": text} for text in texts]}


def _texts(output: str) -> list[str]:
    """MCP content blocks (the toolbox reports them as JSON) as texts: a text block's
    text, any other block whole as JSON; output that is not a block list stays as is."""
    try:
        blocks = json.loads(output)
    except ValueError:
        return [output]
    if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
        return [output]
    return [b["text"] if b.get("type") == "text" and isinstance(b.get("text"), str)
            else json.dumps(b, ensure_ascii=False) for b in blocks]
