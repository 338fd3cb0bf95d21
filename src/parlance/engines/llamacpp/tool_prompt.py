"""Tools for models whose chat template knows none: Parlance's built-in prompt.

The tools are described in the system message and the model is asked to answer
in the Hermes format (`<tool_call>{…}</tool_call>`), which the output parser and
the call grammar understand. Earlier calls and their results are spelled the
same way, as plain assistant and user text, so any template can render them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from parlance.core.messages import Message
from parlance.core.tools import ToolSpec

PREAMBLE = (
    "You can call functions. Their signatures, as JSON Schema, are inside <tools></tools>:\n"
    "<tools>\n{tools}\n</tools>\n"
    "To call a function, answer with one <tool_call></tool_call> block per call, each "
    "holding a JSON object with the function's name and arguments:\n"
    '<tool_call>\n{{"name": "<function-name>", "arguments": <arguments-object>}}\n</tool_call>'
)


def tool_schemas(tools: Sequence[ToolSpec]) -> list[dict]:
    """Tools as chat templates (and the OpenAI API) spell them."""
    return [{"type": "function",
             "function": {"name": t.name, "description": t.description,
                          "parameters": t.parameters}}
            for t in tools]


def describe_tools(tools: Sequence[ToolSpec]) -> str:
    lines = "\n".join(json.dumps(s, ensure_ascii=False) for s in tool_schemas(tools))
    return PREAMBLE.format(tools=lines)


def _spell_call(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments)
    except json.JSONDecodeError:
        args = arguments
    body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def _spelled(message: Message) -> Message:
    if message.role == "tool":
        return Message("user", f"<tool_response>\n{message.content}\n</tool_response>")
    if message.tool_calls:
        calls = "\n".join(_spell_call(c.name, c.arguments) for c in message.tool_calls)
        content = f"{message.content}\n{calls}" if message.content else calls
        return replace(message, content=content, tool_calls=())
    return message


def with_builtin_tools(messages: Sequence[Message], tools: Sequence[ToolSpec]) -> list[Message]:
    """The conversation with tools described and calls spelled as text."""
    out = [_spelled(m) for m in messages]
    if not tools:
        return out
    prompt = describe_tools(tools)
    if out and out[0].role in ("system", "developer"):
        out[0] = replace(out[0], content=f"{out[0].content}\n\n{prompt}")
    else:
        out.insert(0, Message("system", prompt))
    return out
