"""Forced calls in the layouts that are not JSON (syntax.py's `layout`): a call as the
family writes it, its arguments held to the tool's schema as far as the layout allows.

- keyed (Apertus): `{"NAME": ARGS}`, the arguments one `%json`.
- pythonic (LFM2): `NAME(key=value, …)`, each value a `%json` of its property (a JSON
  string or number is a Python literal too), `True`/`False`/`None` for booleans and nulls.
- gemma4 (Gemma 4): `call:NAME{key:value,…}`, strings between `<|"|>` marks, numbers,
  booleans and nulls as in JSON (a `%json` of the property), lists and objects in kind.

Keys go in the schema's order, required ones always, the others optional.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from parlance.core.tools import ToolSpec
from parlance.engines.parsing.syntax import GEMMA4_STRING

Literal = Callable[[str], str]
_KEY = "/[A-Za-z_][A-Za-z0-9_\\-]*/"


def _quoted(text: str) -> str:
    return json.dumps(text)


def _props(schema: Any) -> tuple[list[tuple[str, Any]], set[str]]:
    props = schema.get("properties") if isinstance(schema, dict) else None
    required = set(schema.get("required", ())) if isinstance(schema, dict) else set()
    return (list(props.items()) if isinstance(props, dict) else []), required


def _members(prefix: str, parts: list[tuple[str, bool]], sep: str, rules: list[str]) -> str:
    """The rule for `parts` (rule text, required) in order, joined by `sep`, each optional
    one present or not (`seq_k`: nothing written yet, `rest_k`: something written)."""
    n = len(parts)
    for k in range(n - 1, -1, -1):
        part, required = parts[k]
        rest = f" {prefix}_rest_{k + 1}" if k + 1 < n else ""
        seq_next = f"{prefix}_seq_{k + 1}" if k + 1 < n else ""
        if required:
            rules.append(f"{prefix}_seq_{k}: {part}{rest}")
            rules.append(f"{prefix}_rest_{k}: {sep} {part}{rest}")
        else:
            rules.append(f"{prefix}_seq_{k}: {part}{rest} | {seq_next}")
            rules.append(f"{prefix}_rest_{k}: {sep} {part}{rest} | {rest.strip()}")
    return f"{prefix}_seq_0" if n else ""


class LayoutCall:
    """The rules of one tool's call in a non-JSON layout."""

    def __init__(self, i: int, tool: ToolSpec, layout: str, literal: Literal,
                 json_rule: Callable[[Any], str], regex_literal: Callable[[str], str]):
        self.rules: list[str] = []
        self._i = i
        self._literal = literal
        self._json = json_rule
        self._regex = regex_literal
        self._count = 0
        name = tool.name
        if layout == "keyed":
            body = f"{_quoted('{' + json.dumps(name, ensure_ascii=False) + ': ')} " \
                   f"{json_rule(tool.parameters)} {_quoted('}')}"
        elif layout == "pythonic":
            body = f"{_quoted(name + '(')} {self._python_args(tool.parameters)} {_quoted(')')}"
        elif layout == "gemma4":
            body = f"{_quoted('call:' + name)} {self._gemma_object(tool.parameters)}"
        else:
            raise ValueError(f"no forced layout {layout!r}")
        self.rules.append(f"call_{i}: {body}")

    def _name(self, what: str) -> str:
        self._count += 1
        return f"{what}_{self._i}_{self._count}"

    # -- pythonic -----------------------------------------------------------------

    def _python_args(self, schema: Any) -> str:
        props, required = _props(schema)
        if not props:
            rule = self._name("pyarg")
            self.rules.append(f'{rule}: {_KEY} "=" {self._json({})}')
            more = self._name("pyargs")
            self.rules.append(f'{more}: {rule} (", " {rule})* | ')
            return more
        parts = [(f'{_quoted(key + "=")} {self._python_value(prop)}', key in required)
                 for key, prop in props]
        return _members(self._name("py"), parts, '", "', self.rules) or '""'

    def _python_value(self, prop: Any) -> str:
        kind = prop.get("type") if isinstance(prop, dict) else None
        if kind == "boolean":
            return '("True" | "False")'
        if kind == "null":
            return '"None"'
        return self._json(prop)

    # -- gemma4 -------------------------------------------------------------------

    def _gemma_object(self, schema: Any) -> str:
        props, required = _props(schema)
        if not props:
            return self._gemma_any_object()
        parts = [(f'{_quoted(key + ":")} {self._gemma_value(prop)}', key in required)
                 for key, prop in props]
        members = _members(self._name("gm"), parts, '","', self.rules)
        return f'"{{" {members} "}}"'

    def _gemma_value(self, prop: Any) -> str:
        if not isinstance(prop, dict):
            return self._gemma_any()
        kind = prop.get("type")
        values = prop.get("enum", [prop["const"]] if "const" in prop else None)
        if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
            mark = self._literal(GEMMA4_STRING)
            return "(" + " | ".join(f"{mark} {_quoted(v)} {mark}" for v in values) + ")"
        if kind == "string":
            return self._gemma_string()
        if kind in ("integer", "number", "boolean", "null"):
            return self._json(prop)
        if kind == "array":
            item = self._gemma_value(prop.get("items", True))
            return f'"[" ({item} ("," {item})*)? "]"'
        if kind == "object":
            return self._gemma_object(prop)
        return self._gemma_any()

    def _gemma_string(self) -> str:
        mark = self._literal(GEMMA4_STRING)
        if mark != _quoted(GEMMA4_STRING):  # one special token: it ends the text by itself
            return f"{mark} /(?s:.*)/ {mark}"
        rule = self._name("gtext")  # lexemes are as long as they can be: lazy, up to the mark
        self.rules.append(f"{rule}[lazy]: /(?s:.*){self._regex(GEMMA4_STRING)}/")
        return f"{mark} {rule}"

    def _gemma_any(self) -> str:
        rule = f"gany_{self._i}"
        if not any(r.startswith(rule + ":") for r in self.rules):
            string = self._gemma_string()
            self.rules.append(
                f'{rule}: {string} | {self._json({"type": ["number", "boolean", "null"]})}'
                f' | "[" ({rule} ("," {rule})*)? "]"'
                f' | "{{" ({_KEY} ":" {rule} ("," {_KEY} ":" {rule})*)? "}}"')
        return rule

    def _gemma_any_object(self) -> str:
        value = self._gemma_any()
        return f'"{{" ({_KEY} ":" {value} ("," {_KEY} ":" {value})*)? "}}"'
