"""Grammars that make structured output and tool calls valid by construction.

Written as llguidance grammars (Lark with embedded `%json` JSON Schemas), so any
engine that masks tokens with llguidance can use them. JSON is generated in a
fixed compact layout (`, ` and `: `, no free whitespace): a small model cannot
wander off into endless blank lines, and the output still parses as the JSON it
is. Objects that list properties and do not say otherwise are closed
(`additionalProperties: false`): a schema's own properties are what a client
expects, and every output still validates against the client's original schema.

A freeform tool (raw text input) is called with its name alone, `{"name": …}`, then
its input on the next line. The tool's own grammar (Lark or a regex) constrains that
input as a subgrammar of its own, so the client's rule names never meet ours; input
without a grammar is any text up to the region's close marker (or the end of the
output, in a syntax without one).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import unquote

import llguidance

from parlance.core.errors import InvalidRequest
from parlance.core.request import GenerationRequest
from parlance.core.tools import InputGrammar, ToolSpec
from parlance.engines.grammar_layouts import LayoutCall
from parlance.engines.grammar_pythonic import pythonic_call
from parlance.engines.parsing.python_tag import BUILTIN_TOOLS
from parlance.engines.parsing.syntax import SPECIAL_MARKERS, SYNTAXES, Tagged, ToolSyntax

# `lenient`: keywords llguidance does not implement (`propertyNames`, as in one of Claude
# Code's tools) are not enforced rather than refused, as llama.cpp's own conversion does;
# a schema that is wrong is still a 400.
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ",
               "lenient": True}
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
    """Why this JSON Schema cannot be enforced, or None when it can: llguidance cannot
    compile it, or a `$ref` reaches no schema. (Keywords the grammar leaves out,
    `uniqueItems` say, are checked on the finished value: `engines/output_check.py`.)"""
    if not isinstance(schema, dict):
        return "a JSON Schema must be an object"
    loop = ref_loop(schema)
    if loop:
        return loop
    grammar = llguidance.LLMatcher.grammar_from_lark(f"start: {_json_rule(schema)}")
    problem = _validate(grammar)
    if not problem:
        return None
    first = problem.splitlines()[0]
    return first.split("failed to compile JSON schema: ", 1)[-1]


def ref_loop(schema: dict[str, Any]) -> str | None:
    """A local `$ref` that reaches no schema that constrains a value: `$defs` A → B → A,
    or A → A, directly or through `allOf` (or every option of an `anyOf`/`oneOf`).
    llguidance compiles it into a grammar that accepts nothing (the output stopped
    mid-value). None when every reference the schema uses reaches one; recursion
    through a property or an item is fine. Linear in the schema: a fixpoint over
    "reaches a schema", each node settled once."""
    nodes = _reachable(schema)
    pending: dict[int, int] = {}  # what each node still waits for
    waiting: dict[int, list[tuple[int, int | None]]] = {}  # on node: (waiter, its group)
    satisfied: set[tuple[int, int]] = set()  # (waiter, group) an option has settled
    settled: list[int] = []
    for key, node in nodes.items():
        needs: list[tuple[int, int | None]] = []
        ref = node.get("$ref")
        target = _pointer(schema, ref[1:]) if isinstance(ref, str) and ref[:1] == "#" else None
        if isinstance(target, dict):
            needs.append((id(target), None))
        needs += [(id(sub), None) for sub in _listed(node, "allOf")]
        groups = 0
        for number, name in enumerate(("anyOf", "oneOf")):
            options = node.get(name)
            if isinstance(options, list) and options and all(isinstance(o, dict)
                                                             for o in options):
                groups += 1
                needs += [(id(option), number) for option in options]
        pending[key] = sum(1 for _, g in needs if g is None) + groups
        for needed, in_group in needs:
            waiting.setdefault(needed, []).append((key, in_group))
        if not pending[key]:
            settled.append(key)
    done = set(settled)
    while settled:
        for waiter, group in waiting.get(settled.pop(), ()):
            if group is not None:
                if (waiter, group) in satisfied:
                    continue
                satisfied.add((waiter, group))
            pending[waiter] -= 1
            if not pending[waiter] and waiter not in done:
                done.add(waiter)
                settled.append(waiter)
    for key, node in nodes.items():
        if key not in done and isinstance(node.get("$ref"), str):
            return (f"the `$ref` {node['$ref']!r} never reaches a schema (the references "
                    "lead back to themselves)")
    return None


def _listed(node: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = node.get(key)
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


# Keywords whose values are data, or schemas only a `$ref` uses (reached through it).
_NOT_WALKED = frozenset({"enum", "const", "default", "examples", "$defs", "definitions"})


def _reachable(schema: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """Every schema object the root uses, by id: its subschemas and what `$ref`s name."""
    found: dict[int, dict[str, Any]] = {}
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict) or id(node) in found:
            continue
        found[id(node)] = node
        ref = node.get("$ref")
        if isinstance(ref, str) and ref[:1] == "#":
            stack.append(_pointer(schema, ref[1:]))
        for key, value in node.items():
            if key in ("properties", "patternProperties", "dependentSchemas"):
                if isinstance(value, dict):
                    stack.extend(value.values())
            elif key not in _NOT_WALKED and isinstance(value, dict | list):
                stack.append(value)
    return found


def _pointer(document: Any, pointer: str) -> Any:
    """The value a JSON pointer (`/$defs/A`, percent-decoded) names, or None."""
    node = document
    for raw in unquote(pointer).split("/")[1:] if pointer else ():
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def check_schemas(request: GenerationRequest) -> None:
    """Refuse, naming the client's parameter, any schema or freeform tool grammar that
    cannot be enforced."""
    fmt = request.response_format
    if fmt is not None and fmt.schema is not None:
        _check(fmt.schema, fmt.param)
    for tool in request.callable_tools:
        if not tool.freeform:
            _check(tool.parameters, tool.param)
        elif tool.grammar is not None:
            problem = grammar_problem(tool.grammar)
            if problem:
                raise InvalidRequest(f"Invalid {tool.grammar.syntax} grammar: {problem}",
                                     param=tool.param, code="invalid_grammar")


def _subgrammar(name: str, grammar: InputGrammar) -> dict[str, Any]:
    if grammar.syntax == "regex":
        lark = json.loads(llguidance.LLMatcher.grammar_from_regex(grammar.definition))
        return {**lark["grammars"][0], "name": name}
    return {"name": name, "lark_grammar": grammar.definition}


def _top_level(lark: str, subgrammars: Sequence[dict[str, Any]]) -> str:
    """The grammar as llguidance takes it: Lark text, or with subgrammars the list."""
    if not subgrammars:
        return llguidance.LLMatcher.grammar_from_lark(lark)
    return json.dumps({"grammars": [{"lark_grammar": lark}, *subgrammars]})


def grammar_problem(grammar: InputGrammar) -> str | None:
    """Why a freeform tool's grammar cannot be enforced, or None when it can."""
    source = _top_level("start: @input", [_subgrammar("input", grammar)])
    problem = _validate(source)
    return problem.splitlines()[0] if problem else None


def _validate(grammar: str) -> str | None:
    """llguidance's verdict on a grammar. It panics on some client values (it cuts a
    value to 100 bytes for its message, possibly inside a character); a panic is a
    refusal of that grammar too, never a 500."""
    try:
        return llguidance.LLMatcher.validate_grammar(grammar) or None
    except BaseException as exc:  # pyo3's PanicException derives from BaseException
        if type(exc).__name__ != "PanicException":
            raise
        return "a value in it could not be read (the grammar compiler failed on it)"


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


_INPUT_PARAMETERS = {"type": "object", "properties": {"input": {"type": "string"}},
                     "required": ["input"]}


class _Calls:
    """The call rules of a set of tools: `call` (JSON arguments) and `freeform` (raw
    input, each alternative ending with the item's close marker, or running to the
    end of the output in a syntax without one), with the freeform tools' grammars."""

    def __init__(self, tools: Sequence[ToolSpec], syntax: ToolSyntax, literal: Literal):
        self.rules: list[str] = []
        self.subgrammars: list[dict[str, Any]] = []
        calls, freeform = [], []
        for i, tool in enumerate(tools):
            if tool.freeform and syntax.layout != "json":
                # a layout with no raw-text form (Python calls, Gemma 4's): the tool is a
                # function of one string, as its description to the model says
                tool = replace(tool, parameters=_INPUT_PARAMETERS)
            if tool.freeform and syntax.layout == "json":
                freeform.append(f"call_{i}")
                self.rules += self._freeform(i, tool, syntax, literal)
                continue
            calls.append(f"call_{i}")
            if syntax.region == "pythonic":
                self.rules += pythonic_call(i, tool, _json_rule)
            elif syntax.region == "python_tag" and tool.name in BUILTIN_TOOLS:
                head = f"{literal(syntax.open)} {quoted(tool.name + '.call(')}"
                self.rules += pythonic_call(i, tool, _json_rule, head)
            elif syntax.tagged is not None:
                self.rules += _tagged_call(i, tool, syntax.tagged, literal)
            elif syntax.layout != "json":
                self.rules += LayoutCall(i, tool, syntax.layout, literal, _json_rule,
                                         _regex_literal).rules
            else:
                self.rules.append(f"call_{i}: {_json_call(tool, syntax)}")
        self.json = bool(calls)
        self.free = bool(freeform)
        if calls:
            self.rules.append("call: " + " | ".join(calls))
        if freeform:
            self.rules.append("freeform: " + " | ".join(freeform))

    def _freeform(self, i: int, tool: ToolSpec, syntax: ToolSyntax,
                  literal: Literal) -> list[str]:
        header = _json_rule({"type": "object", "properties": {"name": {"const": tool.name}},
                             "required": ["name"]})
        close = _lit(syntax.item_close, literal) if syntax.close else ""
        if tool.grammar is not None:
            self.subgrammars.append(_subgrammar(f"input_{i}", tool.grammar))
            return [f'call_{i}: {header} "\\n" @input_{i} {close}'.rstrip()]
        if syntax.close is None:  # the input runs to the end of the output
            return [f'call_{i}: {header} "\\n" /(?s:.*)/']
        marker = literal(syntax.close)
        if marker != quoted(syntax.close):  # a special token ends the text by itself
            return [f'call_{i}: {header} "\\n" /(?s:.*)/ {marker}']
        # Lexemes are as long as they can be: the text stops at the first close marker.
        ending = _regex_literal(syntax.item_close)
        return [f'call_{i}: {header} "\\n" input_{i}', f"input_{i}[lazy]: /(?s:.*){ending}/"]


def _json_call(tool: ToolSpec, syntax: ToolSyntax) -> str:
    """`{"name": …, "<arguments key>": …}` in the fixed JSON layout, the arguments a
    `%json` of their own: the tool's schema stays the root of its document, so its
    `$ref`s (`#/$defs/…`, `#/definitions/…`, `#` itself) point where the client meant
    rather than into a wrapper around it."""
    name = json.dumps(tool.name, ensure_ascii=False)
    opening = f'"{syntax.name_key}": {name}, "{syntax.args_key}": '
    args = f"{_json_rule(tool.parameters)} {quoted('}')}"
    if syntax.id_key:  # Command R7B: `{"tool_call_id": "0", "tool_name": …, "parameters": …}`
        number = quoted('{"' + syntax.id_key + '": "') + " /[0-9]{1,4}/ "
        rest = quoted('", ' + opening)
        return f"{number}{rest} {args}"
    return f"{quoted('{' + opening)} {args}"


def _tagged_call(i: int, tool: ToolSpec, tags: Tagged, literal: Literal) -> list[str]:
    """A call in a tagged syntax's own markup: JSON arguments as one `%json`, or one
    key/value parameter per property of the schema (required ones always, in the
    schema's order; the others optional), a string value as text up to its close tag,
    any other as JSON."""
    head = " ".join(x for x in (_lit(tags.before_name, literal), quoted(tool.name),
                                _lit(tags.after_name, literal)) if x)
    tail = _lit(tags.after_args, literal)
    if tags.params is None:
        return [f"call_{i}: {' '.join(x for x in (head, _json_rule(tool.parameters), tail) if x)}"]
    params, schema = tags.params, tool.parameters
    props = schema.get("properties") if isinstance(schema, dict) else None
    required = set(schema.get("required", ())) if isinstance(schema, dict) else set()
    rules: list[str] = []
    parts: list[str] = []
    if not isinstance(props, dict) or not props:
        key = "/[A-Za-z_][A-Za-z0-9_\\-]*/"
        rules.append(f"param_{i}: {_param(params, key, None, f'free_{i}', literal, rules)}")
        parts.append(f"param_{i}*")
    for j, (name, prop) in enumerate(props.items() if isinstance(props, dict) else ()):
        body = _param(params, quoted(name), prop, f"value_{i}_{j}", literal, rules)
        rules.append(f"param_{i}_{j}: {body}")
        parts.append(f"param_{i}_{j}" + ("" if name in required else "?"))
    rules.append(f"call_{i}: {' '.join(x for x in (head, *parts, tail) if x)}")
    return rules


def _param(params: Any, key: str, prop: Any, value_rule: str, literal: Literal,
           rules: list[str]) -> str:
    """One parameter: its tags, its key and its value, then a line break."""
    is_string = not isinstance(prop, dict) or prop.get("type") == "string"
    enum = isinstance(prop, dict) and "enum" in prop and all(isinstance(v, str)
                                                             for v in prop["enum"])
    attrs = params.attrs[0 if is_string or enum else 1] if params.attrs else ""
    opening = " ".join(x for x in (_lit(params.key_open, literal), key,
                                   _lit(params.key_close + attrs, literal),
                                   _lit(params.value_open + params.pad, literal)) if x)
    closing = params.pad + params.value_close
    if enum:
        value = "(" + " | ".join(quoted(v) for v in prop["enum"]) + ")"
        return f'{opening} {value} {_lit(closing, literal)} "\\n"'
    if is_string:  # text up to the first close tag (lexemes are as long as they can be)
        rules.append(f"{value_rule}[lazy]: /(?s:.*){_regex_literal(closing)}/")
        return f'{opening} {value_rule} "\\n"'
    return f'{opening} {_json_rule(prop)} {_lit(closing, literal)} "\\n"'


def _regex_literal(text: str) -> str:
    """`text` matched literally inside a Lark `/…/` regex."""
    return "".join(f"\\{c}" if c in "\\.+*?()|[]{}^$#&-~/" else
                   "\\n" if c == "\n" else c for c in text)


def _calls_layout(syntax: ToolSyntax, parallel: bool, literal: Literal,
                  calls: _Calls | None = None) -> str:
    opener = _lit(syntax.item_open, literal)
    item = " ".join(x for x in (opener, "call", _lit(syntax.item_close, literal)) if x)
    sep, close = _lit(syntax.list_sep, literal), _lit(syntax.list_close, literal)
    if calls is not None and calls.free:
        free = " ".join(x for x in (opener, "freeform") if x)
        if not calls.json:
            item = free
        elif syntax.close is not None:
            item = f"({item} | {free})"
        else:  # freeform input runs to the end: only the last call, and no list close
            last = f"({' '.join(x for x in (item, close) if x)} | {free})"
            more = f"({item} {sep})*" if parallel else ""
            return " ".join(x for x in (_lit(syntax.list_open, literal), more, last) if x)
        if syntax.close is None:
            close = ""
    more = f" ({sep} {item})*" if parallel else ""
    return " ".join(x for x in (_lit(syntax.list_open, literal), f"{item}{more}", close) if x)


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


_MARKERS = tuple({m for s in SYNTAXES.values() for m in (s.open, s.close) if m}
                 | set(SPECIAL_MARKERS))


def forced_calls_grammar(tools: Sequence[ToolSpec], syntax: ToolSyntax, *, parallel: bool,
                         content_schema: dict[str, Any] | None = None,
                         literal: Literal = quoted, lead: bool = False) -> str:
    """The output is tool calls in the model's syntax (or, when `content_schema` is
    given, either that JSON or the calls)."""
    calls = _Calls(tools, syntax, literal)
    start = _calls_layout(syntax, parallel, literal, calls)
    if content_schema is not None:
        start = f"{_json_rule(content_schema)} | {start}"
    return _top_level("\n".join([*_start(start, lead), *calls.rules]), calls.subgrammars)


def region_grammar(tools: Sequence[ToolSpec], syntax: ToolSyntax, *, parallel: bool,
                   literal: Literal = quoted) -> str:
    """What follows a call marker the model opened by itself (lazy grammar): the
    calls of that region, up to and including its close marker."""
    calls = _Calls(tools, syntax, literal)
    if syntax.close is not None and not syntax.list_open:
        options = [f"call WS? {literal(syntax.close)}"] if calls.json else []
        options += ["freeform"] if calls.free else []
        start = f"WS? ({' | '.join(options)})"
    else:
        layout = _calls_layout(syntax, parallel, literal, calls)
        opener = _lit(syntax.open, literal)
        start = layout[len(opener):].strip() if layout.startswith(opener) else layout
    lark = "\n".join([f"start: {start}", "WS: /[ \\t\\r\\n]+/", *calls.rules])
    return _top_level(lark, calls.subgrammars)
