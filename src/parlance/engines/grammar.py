"""Grammars that make structured output and tool calls valid by construction.

Written as llguidance grammars (Lark with embedded `%json` JSON Schemas), so any
engine that masks tokens with llguidance can use them. JSON is generated in a
fixed compact layout (`, ` and `: `, no free whitespace): a small model cannot
wander off into endless blank lines, and the output still parses as the JSON it
is. Objects that list properties and do not say otherwise are closed
(`additionalProperties: false`): a schema's own properties are what a client
expects, and every output still validates against the client's original schema.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import llguidance

from parlance.core.errors import InvalidRequest
from parlance.core.request import GenerationRequest
from parlance.core.tools import ToolSpec
from parlance.engines.parsing.syntax import SYNTAXES, ToolSyntax

JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
ANY_OBJECT: dict[str, Any] = {"type": "object"}

_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMA_ONE = ("items", "not", "if", "then", "else", "additionalItems", "contains")

Literal = Callable[[str], str]  # spells a marker in Lark (a special token or a string)


def quoted(text: str) -> str:
    return json.dumps(text)


def closed(schema: Any) -> Any:
    """`schema` with every object that does not say otherwise closed."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if "properties" in out and "additionalProperties" not in out and "patternProperties" not in out:
        out["additionalProperties"] = False
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [closed(s) for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: closed(s) for k, s in out[key].items()}
    for key in _SUBSCHEMA_ONE:
        if key in out:
            out[key] = closed(out[key])
    if isinstance(out.get("additionalProperties"), dict):
        out["additionalProperties"] = closed(out["additionalProperties"])
    return out


def _json_rule(schema: Any) -> str:
    return "%json " + json.dumps({**closed(schema), "x-guidance": JSON_LAYOUT})


def schema_problem(schema: Any) -> str | None:
    """Why this JSON Schema cannot be enforced, or None when it can."""
    if not isinstance(schema, dict):
        return "a JSON Schema must be an object"
    grammar = llguidance.LLMatcher.grammar_from_lark(f"start: {_json_rule(schema)}")
    problem = llguidance.LLMatcher.validate_grammar(grammar)
    if not problem:
        return None
    first = problem.splitlines()[0]
    return first.split("failed to compile JSON schema: ", 1)[-1]


def check_schemas(request: GenerationRequest) -> None:
    """Refuse, naming the client's parameter, any schema that cannot be enforced."""
    fmt = request.response_format
    if fmt is not None and fmt.schema is not None:
        _check(fmt.schema, fmt.param)
    for tool in request.callable_tools:
        _check(tool.parameters, tool.param)


def _check(schema: Any, param: str) -> None:
    problem = schema_problem(schema)
    if problem:
        raise InvalidRequest(f"Invalid JSON Schema: {problem}", param=param,
                             code="invalid_schema")


# After reasoning, models put a line break or two before the answer.
_LEAD = "LEAD: /[ \\t\\r\\n]{1,4}/"


def _start(body: str, lead: bool) -> list[str]:
    return [f"start: LEAD? ({body})", _LEAD] if lead else [f"start: {body}"]


def schema_grammar(schema: dict[str, Any] | None, *, lead: bool = False) -> str:
    """The whole output is one JSON value valid against `schema` (any object if None);
    `lead` allows a little whitespace first (the answer follows reasoning)."""
    rules = _start(_json_rule(schema or ANY_OBJECT), lead)
    return llguidance.LLMatcher.grammar_from_lark("\n".join(rules))


def _call_rules(tools: Sequence[ToolSpec], syntax: ToolSyntax) -> list[str]:
    rules = ["call: " + " | ".join(f"call_{i}" for i in range(len(tools)))]
    for i, tool in enumerate(tools):
        call = {"type": "object",
                "properties": {"name": {"const": tool.name}, syntax.args_key: tool.parameters},
                "required": ["name", syntax.args_key]}
        rules.append(f"call_{i}: {_json_rule(call)}")
    return rules


def _calls_layout(syntax: ToolSyntax, parallel: bool, literal: Literal) -> str:
    item = " ".join(x for x in (_lit(syntax.item_open, literal), "call",
                                _lit(syntax.item_close, literal)) if x)
    more = f" ({_lit(syntax.list_sep, literal)} {item})*" if parallel else ""
    return " ".join(x for x in (_lit(syntax.list_open, literal), f"{item}{more}",
                                _lit(syntax.list_close, literal)) if x)


def _lit(text: str, literal: Literal) -> str:
    """Spells `text`, using `literal` for the syntax markers inside it."""
    if not text:
        return ""
    for marker in sorted(_MARKERS, key=len, reverse=True):
        at = text.find(marker)
        if at >= 0:
            parts = [_lit(text[:at], literal), literal(marker), _lit(text[at + len(marker):],
                                                                     literal)]
            return " ".join(p for p in parts if p)
    return quoted(text)


_MARKERS = tuple({m for s in SYNTAXES.values() for m in (s.open, s.close) if m})


def forced_calls_grammar(tools: Sequence[ToolSpec], syntax: ToolSyntax, *, parallel: bool,
                         content_schema: dict[str, Any] | None = None,
                         literal: Literal = quoted, lead: bool = False) -> str:
    """The output is tool calls in the model's syntax (or, when `content_schema` is
    given, either that JSON or the calls)."""
    start = _calls_layout(syntax, parallel, literal)
    if content_schema is not None:
        start = f"{_json_rule(content_schema)} | {start}"
    lark = "\n".join([*_start(start, lead), *_call_rules(tools, syntax)])
    return llguidance.LLMatcher.grammar_from_lark(lark)


def region_grammar(tools: Sequence[ToolSpec], syntax: ToolSyntax, *, parallel: bool,
                   literal: Literal = quoted) -> str:
    """What follows a call marker the model opened by itself (lazy grammar): the
    calls of that region, up to and including its close marker."""
    if syntax.close is not None:
        start = f"WS? call WS? {literal(syntax.close)}"
    else:
        layout = _calls_layout(syntax, parallel, literal)
        opener = _lit(syntax.open, literal)
        start = layout[len(opener):].strip() if layout.startswith(opener) else layout
    lark = "\n".join([f"start: {start}", "WS: /[ \\t\\r\\n]+/", *_call_rules(tools, syntax)])
    return llguidance.LLMatcher.grammar_from_lark(lark)
