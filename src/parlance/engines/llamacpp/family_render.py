"""What some families' templates read besides `messages` and `tools`, and how they take
a conversation's earlier calls, as llama.cpp's handlers pass them:

- Llama 3.x: `builtin_tools`, the builtin tools the request offers by name
  (`brave_search`, `wolfram_alpha`, `code_interpreter`, …), so the template announces
  them and writes their calls back as `<|python_tag|>name.call(…)`; `date_string`.
- FireFunction v2: `functions` (the tools as indented JSON text) and `datetime`.
- Granite 3.x: the template writes no `tool_calls`, so an earlier call goes into its
  message's content as the model wrote it (`<|tool_call|>[{"name": …, "arguments": …}]`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from parlance.core.messages import Message
from parlance.core.tools import ToolSpec
from parlance.engines.llamacpp.tool_prompt import tool_schemas
from parlance.engines.parsing.python_tag import BUILTIN_TOOLS

LLAMA_BUILTIN_TOOLS = BUILTIN_TOOLS


def template_vars(fmt: str, tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """The extra variables the family's template reads."""
    now = datetime.now(UTC)
    if fmt == "llama3_json":
        builtin = [t.name for t in tools if t.name in LLAMA_BUILTIN_TOOLS]
        extra: dict[str, Any] = {"date_string": now.strftime("%d %b %Y")}
        if builtin:
            extra["builtin_tools"] = builtin
        return extra
    if fmt == "firefunction_v2":
        return {"functions": json.dumps(tool_schemas(tools), indent=2) if tools else "",
                "datetime": now.strftime("%b %d %Y %H:%M:%S GMT")}
    return {}


def history(fmt: str, messages: Sequence[Message]) -> list[Message]:
    """The conversation as the family's template takes it."""
    if fmt != "granite":
        return list(messages)
    out = []
    for m in messages:
        if not m.tool_calls:
            out.append(m)
            continue
        calls = [{"name": c.name, "arguments": _arguments(c.arguments)} for c in m.tool_calls]
        written = "<|tool_call|>" + json.dumps(calls, ensure_ascii=False)
        out.append(replace(m, content=m.content + written, tool_calls=()))
    return out


def _arguments(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
