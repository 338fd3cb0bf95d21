"""Anthropic's MCP connector (`mcp_servers`): per-request MCP servers whose tools the
server runs itself, in the same tool loop and under the same operator rules as LM
Studio's `ephemeral_mcp` (`--allow-request-mcp`, the address guard). The response
shows each call as an `mcp_tool_use` block followed by its `mcp_tool_result`."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import Field

from parlance.core.events import ToolRefused
from parlance.core.tools import ToolServerRef
from parlance.dialects.mcp_servers import server_ref
from parlance.dialects.wire import WireModel


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


def use_block(call_id: str, name: str, server: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "mcp_tool_use", "id": call_id, "name": name, "server_name": server,
            "input": arguments}


def result_block(call_id: str, outcome: str | ToolRefused) -> dict[str, Any]:
    """The call's result: the tool's content blocks as text blocks, or (`is_error`) why
    the call did not run."""
    if isinstance(outcome, ToolRefused):
        texts, is_error = [outcome.reason], True
    else:
        texts, is_error = _texts(outcome), False
    return {"type": "mcp_tool_result", "tool_use_id": call_id, "is_error": is_error,
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
