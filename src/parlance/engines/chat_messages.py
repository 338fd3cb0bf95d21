"""A conversation's messages as OpenAI-shaped dicts, the shape both consumers of a
chat read: chat templates (written for Hugging Face transformers, which passes these
dicts) and OpenAI-compatible servers. They differ only in how a call's arguments are
written: a template walks them as an object, a server takes the JSON text."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from parlance.core.messages import Message, ToolCall

FREEFORM_FIELD = "input"  # a freeform tool's raw text, as a function's one argument


def openai_message(message: Message, arguments: Callable[[ToolCall], Any],
                   name_of: Callable[[str], str] = str) -> dict[str, Any]:
    """`arguments(call)`: the call's arguments as the consumer reads them (a freeform
    tool's call is a function of one string, `FREEFORM_FIELD`); `name_of`: the name a
    tool goes by there. `developer` becomes `system`, which every template and server
    knows; earlier reasoning goes as `reasoning_content`, which templates that
    interleave thinking with tool calls render (the others ignore it)."""
    role = "system" if message.role == "developer" else message.role
    out: dict[str, Any] = {"role": role, "content": message.content}
    if message.name:
        out["name"] = message.name
    if message.reasoning:
        out["reasoning_content"] = message.reasoning
    if message.tool_calls:
        out["tool_calls"] = [
            {"id": call.id, "type": "function",
             "function": {"name": name_of(call.name), "arguments": arguments(call)}}
            for call in message.tool_calls]
    if message.tool_call_id is not None:
        out["tool_call_id"] = message.tool_call_id
    return out
