"""Anthropic's spelling of call ids. Engines name calls `call_…` whatever the dialect;
Anthropic's clients see `toolu_…` (`mcptoolu_…` for a call the server runs). An id
the client sent back (in a `tool_use` block) reaches the template as it was sent."""

from __future__ import annotations


def _spelled(call_id: str, prefix: str) -> str:
    return prefix + call_id.removeprefix("call_") if call_id.startswith("call_") else call_id


def tool_use_id(call_id: str) -> str:
    return _spelled(call_id, "toolu_")


def mcp_tool_use_id(call_id: str) -> str:
    return _spelled(call_id, "mcptoolu_")
