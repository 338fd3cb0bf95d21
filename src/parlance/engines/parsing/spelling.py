"""Calls written out in a family's own markup (the layout its grammar forces): for the
history of a template that renders no `tool_calls` (LFM2 writes them into the content)
and for the example a built-in tool description gives in the family's markup."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from parlance.engines.parsing.gemma4 import gemma4_call
from parlance.engines.parsing.pythonic import python_call
from parlance.engines.parsing.syntax import Tagged, ToolSyntax


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _tagged(tags: Tagged, name: str, arguments: Any) -> str:
    if tags.params is None:
        body = _json(arguments)
    else:
        p = tags.params
        pairs = arguments.items() if isinstance(arguments, dict) else [("input", arguments)]
        body = "".join(
            f"{p.key_open}{key}{p.key_close}"
            f"{(p.attrs[0] if isinstance(value, str) else p.attrs[1]) if p.attrs else ''}"
            f"{p.value_open}{p.pad}{value if isinstance(value, str) else _json(value)}"
            f"{p.pad}{p.value_close}\n" for key, value in pairs)
    return f"{tags.before_name}{name}{tags.after_name}{body}{tags.after_args}"


def _item(syntax: ToolSyntax, name: str, arguments: Any, number: int) -> str:
    if syntax.region == "pythonic":  # Llama 4
        return python_call(name, arguments)
    match syntax.layout:
        case "keyed":
            return _json({name: arguments})
        case "pythonic":
            return python_call(name, arguments)
        case "gemma4":
            return gemma4_call(name, arguments)
    numbered = {syntax.id_key: str(number)} if syntax.id_key else {}  # Command R7B's
    return _json({**numbered, syntax.name_key: name, syntax.args_key: arguments})


def spell_calls(syntax: ToolSyntax, calls: Sequence[tuple[str, Any]]) -> str:
    """`calls` (name, arguments as a JSON value) as the model writes them, one region."""
    if syntax.tagged is not None:
        return syntax.list_sep.join(_tagged(syntax.tagged, n, a) for n, a in calls)
    items = [_item(syntax, name, arguments, n) for n, (name, arguments) in enumerate(calls)]
    if syntax.list_open:
        return syntax.list_open + syntax.list_sep.join(items) + syntax.list_close
    return syntax.list_sep.join(f"{syntax.item_open}{item}{syntax.item_close}"
                                for item in items)
