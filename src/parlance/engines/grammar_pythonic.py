"""A forced call in pythonic markup (Llama 4's `get_weather(city="Paris")`, Llama 3's
builtin `<|python_tag|>brave_search.call(query="…")`): the name,
then one `key=value` per property of the tool's schema (required ones always, in the
schema's order, then the optional ones, each at most once), each value a `%json` of its
own property schema (a JSON value reads as the Python literal it also is; the parser
takes `true` / `null` as well)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from parlance.core.tools import ToolSpec

_ANY_KEY = "/[A-Za-z_][A-Za-z0-9_]*/"


def pythonic_call(i: int, tool: ToolSpec, json_rule: Callable[[Any], str],
                  head: str | None = None) -> list[str]:
    """`head`: what opens the call, in Lark (`name(` by default)."""
    schema = tool.parameters if isinstance(tool.parameters, dict) else {}
    props = schema.get("properties")
    head = head or json.dumps(tool.name + "(")
    if not isinstance(props, dict) or not props:
        pair = f'{_ANY_KEY} "=" {json_rule({})}'
        return [f"kv_{i}: {pair}", f'call_{i}: {head} (kv_{i} (", " kv_{i})*)? ")"']
    required = [k for k in props if k in set(schema.get("required", ()))]
    optional = [k for k in props if k not in required]
    rules = []
    names = {}
    for j, key in enumerate(props):
        names[key] = f"p_{i}_{j}"
        rules.append(f'p_{i}_{j}: {json.dumps(key + "=")} {json_rule(props[key])}')

    def tail(keys: list[str]) -> str:
        return " ".join(f'(", " {names[k]})?' for k in keys)

    if required:
        body = " ".join([names[required[0]], *(f'", " {names[k]}' for k in required[1:]),
                         tail(optional)])
    else:
        options = [f"{names[k]} {tail(optional[n + 1:])}".strip()
                   for n, k in enumerate(optional)]
        body = "(" + " | ".join(f"({o})" for o in options) + ")?"
    rules.append(f'call_{i}: {head} {body.strip()} ")"')
    return rules
