"""What some families' templates read besides `messages` and `tools`, as llama.cpp's
handlers pass them:

- Llama 3.x: `builtin_tools`, the builtin tools the request offers by name
  (`brave_search`, `wolfram_alpha`, `code_interpreter`, …), so the template announces
  them and writes their calls back as `<|python_tag|>name.call(…)`; `date_string`.
- FireFunction v2: `functions` (the tools as indented JSON text) and `datetime`.

(Granite 3.x's earlier calls, which its template does not render, go into the content
through the format's `calls_in_content`, as LFM2's do.)
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

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

